//! What the client adds to a request, beside a raw `redis` crate call of the same command:
//! p50/p99 with the store healthy, with leases (most requests never leave the process), while
//! the store is stalled (SIGSTOP: p99 bounded by the deadline, the circuit skips the stall), with
//! 1, 16 and 256 requests in flight when it freezes, while it answers `OOM`, and what the billing
//! journal costs per request admitted without the store (and its fsync, the journal's window),
//! and a streaming token gateway (tokens per second, and what a settle adds per request).
//!
//! `make bench-client` (or `cargo run --release -p redis-ratelimit-client --example bench --
//! [REQUESTS]`) starts its own redis-server on 127.0.0.1 with `target/release/libredis_ratelimit.so`
//! (`$RL_MODULE` overrides) and prints one line per case.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Source, Store};

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50), at(0.99), at(1.0))
}

fn print(case: &str, samples: Vec<Duration>) -> (Duration, Duration) {
    let n = samples.len();
    let (p50, p99, max) = percentiles(samples);
    println!(
        "{case:<44} n={n:<6} p50={:>8.1} µs  p99={:>8.1} µs  max={:>8.1} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6
    );
    (p50, p99)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(20_000), |a| a.parse())?;
    let module = std::env::var("RL_MODULE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/libredis_ratelimit.so"
        )
        .into()
    });
    let port = (61_000..65_000)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .ok_or("no free port")?;
    let dir = std::env::temp_dir().join(format!("rl-client-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir", &dir.display().to_string()])
        .args(["--loadmodule", &module])
        .stdout(Stdio::null())
        .spawn()?;
    let url = format!("redis://127.0.0.1:{port}/");
    let result = run(&url, server.id(), n).await;
    let _ = Command::new("kill")
        .arg("-CONT")
        .arg(server.id().to_string())
        .status();
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(url: &str, pid: u32, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let client = redis::Client::open(url)?;
    let started = Instant::now();
    let mut raw = loop {
        match client.get_multiplexed_async_connection().await {
            Ok(c) => break c,
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => return Err(e.into()),
        }
    };
    // A limit that always admits, so every case does the same work on the server.
    let policy = Policy::gcra(1_000_000_000, 1000);
    println!("{n} sequential requests per case, one connection, 127.0.0.1");

    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 1000 {
        let t = Instant::now();
        let _: Vec<i64> = redis::cmd("RL.GCRA")
            .arg("bench:raw")
            .arg(policy.limit)
            .arg(policy.window_ms)
            .query_async(&mut raw)
            .await?;
        if i >= 1000 {
            samples.push(t.elapsed());
        }
    }
    let (raw50, raw99) = print("raw redis crate RL.GCRA", samples);

    let store = Store::connect(url).await?;
    let limiter = Limiter::new(store, Config::default());
    let api = Limit::new("api", policy, Class::Contract);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + 1000 {
        let t = Instant::now();
        limiter.check(&api, "bench:client").await?;
        if i >= 1000 {
            samples.push(t.elapsed());
        }
    }
    let (c50, c99) = print("client check (store healthy)", samples);
    println!(
        "{:<44} p50 {:+.1} µs  p99 {:+.1} µs",
        "  added over raw",
        (c50.as_secs_f64() - raw50.as_secs_f64()) * 1e6,
        (c99.as_secs_f64() - raw99.as_secs_f64()) * 1e6
    );

    let leased = Limit::new(
        "api",
        Policy::token_bucket(1_000_000_000, 1000),
        Class::Contract,
    )
    .lease(100);
    let mut samples = Vec::with_capacity(n);
    let calls = limiter.stats().store_calls;
    for i in 0..n + 1000 {
        let t = Instant::now();
        limiter.check(&leased, "bench:lease").await?;
        if i >= 1000 {
            samples.push(t.elapsed());
        }
    }
    print("client check with lease(100)", samples);
    println!(
        "{:<44} {} store calls for {} requests",
        "  store calls",
        limiter.stats().store_calls - calls,
        n + 1000
    );

    // Stalled: SIGSTOP. The default deadline (5 ms) and circuit (3 failures, probes from 100 ms).
    Command::new("kill")
        .arg("-STOP")
        .arg(pid.to_string())
        .status()?;
    let mut samples = Vec::with_capacity(n);
    let until = Instant::now() + Duration::from_secs(3);
    let calls = limiter.stats().store_calls;
    while Instant::now() < until {
        let t = Instant::now();
        limiter.check(&api, "bench:client").await?;
        samples.push(t.elapsed());
    }
    let stalled_calls = limiter.stats().store_calls - calls;
    Command::new("kill")
        .arg("-CONT")
        .arg(pid.to_string())
        .status()?;
    print("client check, store stalled 3 s (SIGSTOP)", samples);
    println!(
        "{:<44} {stalled_calls} store calls (timeouts and probes), deadline {:?}",
        "  store calls",
        limiter.deadline()
    );

    for in_flight in [1usize, 16, 256] {
        frozen_in_flight(url, pid, in_flight).await?;
    }
    out_of_memory(url, &mut raw, n).await?;
    journal_cost(url, &mut raw, n).await?;
    token_gateway(url, n / 10).await?;
    Ok(())
}

/// A fake model's answer of `left` tokens ("tok "), 8 to a data frame.
struct Completion {
    left: usize,
}

impl http_body::Body for Completion {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let k = self.left.min(8);
        self.left -= k;
        let frame = http_body::Frame::data(bytes::Bytes::from("tok ".repeat(k)));
        std::task::Poll::Ready(Some(Ok(frame)))
    }
}

/// The streaming gateway of `examples/tokens.rs` in process (an axum router called with
/// `oneshot`, no HTTP connection): responses of 1,000 tokens behind `RateLimitLayer` (one check,
/// nothing settled) and behind `TokenLimitLayer` (a reservation of 500, the body metered and
/// settled at 1,000: one `RL.SETTLE` more). Tokens per second, and what the settle adds.
async fn token_gateway(url: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    use axum::body::Body;
    use http_body_util::BodyExt;
    use ratelimit_client::layer::{RateLimitLayer, TokenLimitLayer};
    use tower::ServiceExt;

    const TOKENS: usize = 1000;
    let n = n.max(200);
    let limiter = Limiter::new(Store::connect(url).await?, Config::default());
    let policy = Policy::gcra(1_000_000_000, 1000);
    let model = || async { Body::new(Completion { left: TOKENS }) };
    let checked = axum::Router::new()
        .route("/", axum::routing::get(model))
        .layer(RateLimitLayer::new(
            limiter.clone(),
            Limit::new("requests", policy, Class::Contract),
            |_: &http::Request<Body>| Some("bench:tok:checked".to_string()),
        ));
    let tokens = TokenLimitLayer::new(
        limiter.clone(),
        vec![Limit::new("tokens", policy, Class::Contract)],
        |_: &http::Request<Body>| Some(vec!["bench:tok:settled".to_string()]),
        500,
    )
    .count(|frame: &bytes::Bytes| frame.iter().filter(|b| **b == b' ').count() as u64);
    let settled = axum::Router::new()
        .route("/", axum::routing::get(model))
        .layer(tokens);
    let mut rows = Vec::new();
    for (case, app) in [
        ("1,000-token stream, RateLimitLayer", checked),
        ("1,000-token stream, TokenLimitLayer", settled),
    ] {
        let calls = limiter.stats().store_calls;
        let mut samples = Vec::with_capacity(n);
        let started = Instant::now();
        for i in 0..n + 100 {
            let t = Instant::now();
            let req = http::Request::get("/").body(Body::empty())?;
            let resp = app.clone().oneshot(req).await?;
            let body = resp.into_body().collect().await?.to_bytes();
            if body.len() != TOKENS * 4 {
                return Err(format!("{case}: {} bytes", body.len()).into());
            }
            if i >= 100 {
                samples.push(t.elapsed());
            }
        }
        let took = started.elapsed();
        let calls = limiter.stats().store_calls - calls;
        rows.push(print(case, samples));
        println!(
            "{:<44} {:.0} tokens/s, {:.2} store calls per request",
            "",
            ((n + 100) * TOKENS) as f64 / took.as_secs_f64(),
            calls as f64 / (n + 100) as f64
        );
    }
    println!(
        "{:<44} p50 {:+.1} µs  p99 {:+.1} µs",
        "  the settle per request",
        (rows[1].0.as_secs_f64() - rows[0].0.as_secs_f64()) * 1e6,
        (rows[1].1.as_secs_f64() - rows[0].1.as_secs_f64()) * 1e6
    );
    Ok(())
}

fn signal(pid: u32, sig: &str) -> std::io::Result<()> {
    Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .map(|_| ())
}

/// `k` requests in flight (each on its own task, one connection) when the store freezes: how
/// long each waited, and how many waited a whole deadline.
async fn frozen_in_flight(url: &str, pid: u32, k: usize) -> Result<(), Box<dyn std::error::Error>> {
    let limiter = Limiter::new(Store::connect(url).await?, Config::default());
    let api = Limit::new("api", Policy::gcra(1_000_000_000, 1000), Class::Contract);
    for _ in 0..1000 {
        limiter.check(&api, "bench:frozen").await?;
    }
    let deadline = limiter.deadline();
    signal(pid, "-STOP")?;
    let tasks: Vec<_> = (0..k)
        .map(|_| {
            let (l, api) = (limiter.clone(), api.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let d = l.check(&api, "bench:frozen").await;
                (t.elapsed(), d.map(|d| d.source))
            })
        })
        .collect();
    let mut samples = Vec::new();
    let mut fallbacks = 0;
    for t in tasks {
        let (took, source) = t.await?;
        samples.push(took);
        fallbacks += usize::from(matches!(source, Ok(Source::Fallback(_))));
    }
    signal(pid, "-CONT")?;
    let waited = samples.iter().filter(|d| **d >= deadline).count();
    print(&format!("{k} in flight when the store freezes"), samples);
    println!(
        "{:<44} deadline {deadline:?}: {waited} of {k} waited it, {fallbacks} fell back, {} store calls",
        "",
        limiter.stats().store_calls - 1000
    );
    // The store answers again before the next case.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

async fn config_set(
    raw: &mut redis::aio::MultiplexedConnection,
    key: &str,
    value: &str,
) -> redis::RedisResult<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query_async(raw)
        .await
}

/// The store answers `OOM` (maxmemory 1): every class falls back at once, counted; after three
/// the circuit stops calling.
async fn out_of_memory(
    url: &str,
    raw: &mut redis::aio::MultiplexedConnection,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let limiter = Limiter::new(Store::connect(url).await?, Config::default());
    let api = Limit::new("api", Policy::gcra(1_000_000_000, 1000), Class::Contract);
    limiter.check(&api, "bench:oom").await?;
    config_set(raw, "maxmemory", "1").await?;
    let before = limiter.stats();
    let mut samples = Vec::with_capacity(n);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until && samples.len() < n {
        let t = Instant::now();
        limiter.check(&api, "bench:oom").await?;
        samples.push(t.elapsed());
    }
    config_set(raw, "maxmemory", "0").await?;
    let after = limiter.stats();
    let count = samples.len();
    print("client check, store answers OOM", samples);
    println!(
        "{:<44} {} fallbacks counted of {count}, {} store calls",
        "",
        after.fallbacks - before.fallbacks,
        after.store_calls - before.store_calls
    );
    Ok(())
}

/// A billing request admitted without the store (OOM), without and with the journal; and the
/// fsync the journal's thread runs, on the same file system.
async fn journal_cost(
    url: &str,
    raw: &mut redis::aio::MultiplexedConnection,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let quota = Limit::new(
        "quota",
        Policy::fixed_window(1_000_000_000, 86_400_000),
        Class::Billing,
    );
    let path = std::env::temp_dir().join(format!("rl-bench-journal-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut rows = Vec::new();
    for journal in [None, Some(path.clone())] {
        let config = Config {
            billing_journal: journal.clone(),
            ..Config::default()
        };
        let limiter = Limiter::new(Store::connect(url).await?, config);
        config_set(raw, "maxmemory", "1").await?;
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + 1000 {
            let t = Instant::now();
            limiter.check(&quota, "bench:billing").await?;
            if i >= 1000 {
                samples.push(t.elapsed());
            }
        }
        config_set(raw, "maxmemory", "0").await?;
        let case = if journal.is_some() {
            "billing fallback, with the journal"
        } else {
            "billing fallback, no journal"
        };
        rows.push(print(case, samples));
        // Charged now: the next case starts owing nothing.
        limiter.reconcile().await;
        limiter.shutdown().await;
    }
    println!(
        "{:<44} p50 {:+.1} µs  p99 {:+.1} µs",
        "  journal per admitted request",
        (rows[1].0.as_secs_f64() - rows[0].0.as_secs_f64()) * 1e6,
        (rows[1].1.as_secs_f64() - rows[0].1.as_secs_f64()) * 1e6
    );
    // The fsync window: one append and fsync at a time, as the journal's thread does.
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let mut samples = Vec::new();
    for _ in 0..200 {
        file.write_all(b"owe 1 FIXEDWINDOW 1000000000 86400000 - 62656e63683a62696c6c696e67\n")?;
        let t = Instant::now();
        file.sync_data()?;
        samples.push(t.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    print("journal fsync (temp dir)", samples);
    Ok(())
}
