//! Every typed call against a real server with the module: the same reply as the raw command on a
//! twin key at the same pinned instant, and each error its typed kind.

mod support;

use std::time::{Duration, Instant};

use ratelimit_client::{Algorithm, Error, Policy, Shape, ShapeDelay, Store};
use support::Server;

fn words(cmd: &str, key: &str, rest: &[String]) -> Vec<String> {
    let mut w = vec![cmd.to_string(), key.to_string()];
    w.extend(rest.iter().cloned());
    w
}

fn raw(s: &Server, w: &[String]) -> Vec<i64> {
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    s.ints(&w)
}

fn policy_words(p: &Policy) -> Vec<String> {
    let mut w = vec![p.limit.to_string(), p.window_ms.to_string()];
    if let Some(b) = p.burst {
        w.extend(["BURST".to_string(), b.to_string()]);
    }
    w
}

async fn store(s: &Server) -> Store {
    Store::connect(&s.url())
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_command_replies_as_the_raw_command() {
    let s = Server::start();
    let store = store(&s).await;
    assert_eq!(store.backend(), ratelimit_client::Backend::Module);
    let policies = [
        Policy::gcra(10, 1000),
        Policy::gcra(3, 1000).burst(7),
        Policy::token_bucket(10, 1000),
        Policy::token_bucket(7, 60_000).burst(2),
        Policy::sliding_log(10, 1000),
        Policy::sliding_counter(10, 1000),
        Policy::fixed_window(4, 100),
    ];
    for (n, p) in policies.iter().enumerate() {
        let cmd = format!("RL.{}", p.algorithm.name());
        for (step, cost) in [1u64, 3, 0, 2, 5, 1, 0].into_iter().enumerate() {
            let (t, r) = (format!("t:{n}"), format!("r:{n}"));
            let typed = match (p.algorithm, step % 2) {
                // The named calls and the generic one spell the same command.
                (Algorithm::Gcra, 0) => store.gcra(&t, *p, cost).await,
                (Algorithm::TokenBucket, 0) => store.token_bucket(&t, *p, cost).await,
                _ => store.decide(&t, p, cost).await,
            };
            let mut rest = policy_words(p);
            rest.extend(["COST".to_string(), cost.to_string()]);
            match typed {
                Ok(d) => assert_eq!(
                    d.reply().to_vec(),
                    raw(&s, &words(&cmd, &r, &rest)),
                    "{cmd} {rest:?}"
                ),
                Err(Error::Argument(e)) => {
                    let raw_err = s
                        .value(
                            &words(&cmd, &r, &rest)
                                .iter()
                                .map(String::as_str)
                                .collect::<Vec<_>>(),
                        )
                        .unwrap_err();
                    assert_eq!(e, format!("ERR {}", raw_err.detail().unwrap()));
                }
                Err(e) => panic!("{cmd} {rest:?}: {e}"),
            }
            s.clock_advance(7);
        }
        // PEEK of both keys.
        let t = store.peek(&format!("t:{n}")).await.unwrap().unwrap();
        assert_eq!(t.reply().to_vec(), s.ints(&["RL.PEEK", &format!("r:{n}")]));
    }
    assert_eq!(store.peek("missing").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_refund_shape_and_all_reply_as_the_raw_commands() {
    let s = Server::start();
    let store = store(&s).await;
    let p = Policy::token_bucket(100, 1000).burst(30);
    for want in [10u64, 25, 5] {
        let d = store.lease("t:lease", &p, want).await.unwrap();
        let w = [
            "RL.LEASE",
            "r:lease",
            "100",
            "1000",
            "BURST",
            "30",
            "WANT",
            &want.to_string(),
        ];
        assert_eq!(d.reply().to_vec(), s.ints(&w), "WANT {want}");
        s.clock_advance(3);
    }
    let d = store.refund("t:lease", 4).await.unwrap().unwrap();
    assert_eq!(d.reply().to_vec(), s.ints(&["RL.REFUND", "r:lease", "4"]));
    assert_eq!(store.refund("t:missing", 4).await.unwrap(), None);

    for (queue, delay) in [
        (Some(5), ShapeDelay::Default),
        (Some(3), ShapeDelay::Delay(1)),
        (None, ShapeDelay::NoDelay),
    ] {
        let shape = Shape {
            limit: 1,
            window_ms: 1000,
            queue,
            delay,
        };
        let mut w: Vec<String> = vec![
            "RL.SHAPE".into(),
            "r:shape".into(),
            "1".into(),
            "1000".into(),
        ];
        if let Some(q) = queue {
            w.extend(["QUEUE".into(), q.to_string()]);
        }
        match delay {
            ShapeDelay::Default => {}
            ShapeDelay::Delay(d) => w.extend(["DELAY".into(), d.to_string()]),
            ShapeDelay::NoDelay => w.push("NODELAY".into()),
        }
        for _ in 0..3 {
            let t = store.shape("t:shape", &shape, 1).await.unwrap();
            assert_eq!(t.reply().to_vec(), raw(&s, &w), "{w:?}");
        }
        s.clock_advance(10_000);
    }

    let limiters = [
        ("t:{x}:key", Policy::token_bucket(10, 1000), 4u64),
        ("t:{x}:tenant", Policy::fixed_window(5, 86_400_000), 1),
    ];
    for _ in 0..3 {
        let all = store.all(&limiters).await.unwrap();
        let v: redis::Value = s
            .value(&[
                "RL.ALL",
                "2",
                "r:{x}:key",
                "r:{x}:tenant",
                "TOKENBUCKET",
                "10",
                "1000",
                "COST",
                "4",
                "FIXEDWINDOW",
                "5",
                "86400000",
                "COST",
                "1",
            ])
            .unwrap();
        let redis::Value::Array(items) = v else {
            panic!("{v:?}")
        };
        let raw: Vec<Vec<i64>> = items
            .iter()
            .map(|i| redis::from_redis_value(i).unwrap())
            .collect();
        let mut typed = vec![all.combined.reply().to_vec()];
        typed.extend(all.limiters.iter().map(|d| d.reply().to_vec()));
        assert_eq!(typed, raw);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed() {
    let mut s = Server::start();
    let store = store(&s).await;
    match store.decide("e:a", &Policy::gcra(0, 1000), 1).await {
        Err(Error::Argument(m)) => assert!(m.starts_with("ERR invalid L '0'"), "{m}"),
        other => panic!("{other:?}"),
    }
    match store
        .decide("e:a", &Policy::sliding_log(5, 1000).burst(3), 1)
        .await
    {
        Err(Error::Argument(_)) => {}
        other => panic!("{other:?}"),
    }
    store
        .decide("e:g", &Policy::gcra(5, 1000), 1)
        .await
        .unwrap();
    match store.decide("e:g", &Policy::fixed_window(5, 1000), 1).await {
        Err(Error::WrongType(m)) => assert!(m.starts_with("WRONGTYPE"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A stalled server: Timeout, by the short deadline and not the store's own (2 s). The bound
    // is that 2 s, not a margin over 50 ms that a loaded machine's scheduling could eat.
    let short = store.clone().with_deadline(Duration::from_millis(50));
    s.stop();
    let t = Instant::now();
    assert_eq!(
        short.decide("e:b", &Policy::gcra(5, 1000), 1).await,
        Err(Error::Timeout)
    );
    assert!(t.elapsed() < store.deadline(), "{:?}", t.elapsed());
    s.resume();
    // A killed server: Unreachable (or Timeout while reconnecting), never an argument error.
    s.kill();
    let e = short
        .decide("e:b", &Policy::gcra(5, 1000), 1)
        .await
        .unwrap_err();
    assert!(e.store_down(), "{e:?}");
    let e = short
        .decide("e:b", &Policy::gcra(5, 1000), 1)
        .await
        .unwrap_err();
    assert!(e.store_down(), "{e:?}");
    // Nothing listening at all.
    let port = support::free_port();
    assert!(matches!(
        Store::connect(&format!("redis://127.0.0.1:{port}/")).await,
        Err(Error::Unreachable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_or_library_gets_the_scripts_backend() {
    // A plain redis-server: neither the module nor the library.
    let s = Server::plain();
    let result = Store::connect(&s.url()).await;
    // The library served through EVALSHA (docs/functions.md, backends): nothing to install.
    assert_eq!(
        result.map(|s| s.backend()),
        Ok(ratelimit_client::Backend::Scripts)
    );
}
