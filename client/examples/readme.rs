//! The snippet of README.md's "From a gateway", verbatim (client/tests/docs.rs checks it), so
//! that it compiles: `cargo run -p redis-ratelimit-client --example readme` with a store on
//! 127.0.0.1:6379.

use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};

async fn gateway() -> Result<(), ratelimit_client::Error> {
    let store = Store::connect("redis://127.0.0.1:6379/").await?;
    let limiter = Limiter::new(store, Config::default());
    let api = Limit::new("api", Policy::gcra(100, 1000), Class::Contract).lease(10);
    let decision = limiter.check(&api, "rl:key:abc").await?; // allowed, remaining, retry_after_ms, source
    println!("{decision:?}");
    limiter.shutdown().await; // refunds leases, charges billing counts
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ratelimit_client::Error> {
    gateway().await
}
