//! What the client adds to a request, beside a raw `redis` crate call of the same command:
//! p50/p99 with the store healthy, with leases (most requests never leave the process), and while
//! the store is stalled (SIGSTOP: p99 bounded by the deadline, the circuit skips the stall).
//!
//! `make bench-client` (or `cargo run --release -p redis-ratelimit-client --example bench --
//! [REQUESTS]`) starts its own redis-server on 127.0.0.1 with `target/release/libredis_ratelimit.so`
//! (`$RL_MODULE` overrides) and prints one line per case.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};

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
        ratelimit_client::store::DEFAULT_DEADLINE
    );
    Ok(())
}
