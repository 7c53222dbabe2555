//! The capacity class: a limit of it is never sent to the store (the load shedder in front of
//! the service decides it, docs/shedding.md), alone or in an RL.ALL with others.

mod support;

use std::time::Duration;

use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Source, Store};
use support::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_limit_never_reaches_the_store() {
    let s = Server::start();
    let store = Store::connect(&s.url()).await.unwrap();
    // A generous deadline: the default 5 ms is for production stores, and an RL.ALL below that
    // a loaded machine answers late would be decided by its class, not the store.
    let config = Config {
        deadline: Duration::from_secs(2),
        ..Config::default()
    };
    let l = Limiter::new(store, config);
    let capacity = Limit::new("service", Policy::gcra(1, 1000), Class::Capacity);
    let api = Limit::new("api", Policy::gcra(100, 1000), Class::Contract);
    for _ in 0..10 {
        let d = l.check(&capacity, "cap:1").await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.source, Source::Fallback(Class::Capacity));
    }
    let mut c = s.connect();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 0);
    // In one RL.ALL, the others are decided by the store and the capacity one is not sent.
    let all = l
        .check_all(&[(&api, "api:1", 1), (&capacity, "cap:1", 1)])
        .await
        .unwrap();
    assert!(all.combined.allowed);
    assert_eq!(all.limiters[0].source, Source::Store);
    assert_eq!(all.limiters[1].source, Source::Fallback(Class::Capacity));
    let exists: (i64, i64) = redis::pipe()
        .cmd("EXISTS")
        .arg("api:1")
        .cmd("EXISTS")
        .arg("cap:1")
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, (1, 0));
    // Only capacity limits: nothing is sent at all.
    let all = l.check_all(&[(&capacity, "cap:2", 1)]).await.unwrap();
    assert!(all.combined.allowed);
}
