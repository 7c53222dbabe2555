//! The seed's order in one tower stack: the gateway's per-key limits (the client's
//! `RateLimitLayer`, on the store) first, then the load shedder (no store), then the service. A
//! request over its key's limit is answered 429 before it takes a place in the shedder; one
//! within its limit is admitted or shed (503) by what the service can take now. Needs a Redis
//! with the module at `REDIS_URL` (default redis://127.0.0.1:6379/); sends a few requests.

use std::convert::Infallible;

use http::{Request, Response};
use ratelimit_client::layer::RateLimitLayer;
use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};
use ratelimit_shed::{ByHeaders, Settings, ShedLayer, Shedder};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let limiter = Limiter::new(Store::connect(&url).await?, Config::default());
    let per_key = Limit::new("api", Policy::gcra(5, 1000), Class::Contract);
    let key = |req: &Request<String>| {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(|k| format!("rl:api:{k}"))
    };
    let shedder = Shedder::new(Settings::default())?;
    let classify = ByHeaders::new(
        Some(http::HeaderName::from_static("x-priority")),
        Some(http::HeaderName::from_static("x-api-key")),
    );
    // ServiceBuilder runs its layers top to bottom: key limits → shedder → service.
    let app = ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter, per_key, key))
        .layer(ShedLayer::new(shedder.clone(), classify))
        .service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new("served".to_string()))
        });
    for i in 0..8 {
        let req = Request::get("/")
            .header("x-api-key", "abc")
            .header("x-priority", "default")
            .body(String::new())?;
        let resp = app.clone().oneshot(req).await?;
        println!("request {i}: {}", resp.status());
    }
    println!("shedder: {:?}", shedder.stats());
    Ok(())
}
