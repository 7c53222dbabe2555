//! The load: open-loop Poisson arrivals with a tier mix over tenants, and what each request saw
//! (latency from its planned arrival, so a slow system cannot hide its queue).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratelimit_shed::Tier;

/// The offered loads of the main table, as multiples of C.
pub const LOADS: [f64; 4] = [0.5, 1.0, 2.0, 5.0];

/// A client gives up on a request after this long (a failure, never a success).
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// One request's outcome.
#[derive(Clone, Copy)]
pub struct Outcome {
    pub at: Duration,
    pub latency: Duration,
    pub ok: bool,
    pub tier: Tier,
    pub tenant: usize,
    /// Why it failed: the shedder's `x-shed-reason`, or "status"/"timeout" when none said.
    pub failed: Option<&'static str>,
}

/// The `x-shed-reason` values, as the bench counts them.
const REASONS: [&str; 3] = ["overloaded", "over_share", "queue_timeout"];

/// A small xorshift: the load is the same for every system.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// 10 % critical, 60 % default, 20 % sheddable, 10 % batch.
fn tier_of(x: f64) -> Tier {
    match x {
        x if x < 0.1 => Tier::Critical,
        x if x < 0.7 => Tier::Default,
        x if x < 0.9 => Tier::Sheddable,
        _ => Tier::Batch,
    }
}

/// Something to do at a time into the load (the service slowing down, speeding up).
pub type Event = (Duration, Box<dyn FnOnce() + Send>);

/// Open-loop Poisson load: `rates[t]` req/s for tenant t, for `span`; `events` run at their
/// times (in order).
pub async fn load(
    addr: SocketAddr,
    rates: &[f64],
    span: Duration,
    seed: u64,
    events: Vec<Event>,
) -> Vec<Outcome> {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4096)
        .build_http();
    let total: f64 = rates.iter().sum();
    let mut rng = Rng(seed | 1);
    let mut arrivals = Vec::new();
    let mut t = 0.0;
    loop {
        t += -(1.0 - rng.next()).ln() / total;
        if t >= span.as_secs_f64() {
            break;
        }
        let mut pick = rng.next() * total;
        let mut tenant = 0;
        for (i, r) in rates.iter().enumerate() {
            tenant = i;
            if pick < *r {
                break;
            }
            pick -= r;
        }
        arrivals.push((Duration::from_secs_f64(t), tenant, tier_of(rng.next())));
    }
    let start = tokio::time::Instant::now();
    let mut events = events.into_iter().peekable();
    let mut handles = Vec::with_capacity(arrivals.len());
    for (at, tenant, tier) in arrivals {
        while let Some((when, _)) = events.peek() {
            if *when > at {
                break;
            }
            if let Some((_, f)) = events.next() {
                f();
            }
        }
        tokio::time::sleep_until(start + at).await;
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/"))
                .header("x-priority", tier.name())
                .header("x-tenant", format!("tenant-{tenant}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let failed = match tokio::time::timeout(TIMEOUT, client.request(req)).await {
                Ok(Ok(resp)) => {
                    let reason = resp
                        .headers()
                        .get("x-shed-reason")
                        .and_then(|v| v.to_str().ok())
                        .map(|v| REASONS.into_iter().find(|r| *r == v).unwrap_or("other"));
                    let failed =
                        (resp.status() != StatusCode::OK).then(|| reason.unwrap_or("status"));
                    let _ = resp.into_body().collect().await;
                    failed
                }
                _ => Some("timeout"),
            };
            let ok = failed.is_none();
            // Latency from the planned arrival: open loop, no coordinated omission.
            let latency = start.elapsed().saturating_sub(at);
            Outcome {
                at,
                latency,
                ok,
                tier,
                tenant,
                failed,
            }
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(o) = h.await {
            out.push(o);
        }
    }
    out
}

pub fn pct(mut v: Vec<Duration>, p: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v.get(i).copied()
}

pub fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}
