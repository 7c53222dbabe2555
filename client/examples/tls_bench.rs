//! TLS against plaintext, side by side in one run (`make bench-client`): two servers with the
//! module (testkit: one plain, one TLS-only with the harness's CA), the same decisions through
//! the client's `Store` on each — sequential (p50/p99 of one call: the per-call cost) and at a
//! concurrency (requests/s on one multiplexed connection, p50/p99). Connections are long-lived:
//! the handshake is paid once, the record layer on every call.
//!
//! `cargo run --release -p redis-ratelimit-client --example tls_bench [N] [CONCURRENCY]
//! [--url URL]`: `--url` (`make bench-client ARGS="--url rediss://user:pass@host:port/?ca=…"`,
//! any of the client's URL forms) measures that store alone, its password never printed.

use std::time::{Duration, Instant};

use ratelimit_client::{ConnectionSettings, Policy, Store};
use testkit::{Options, Pki, Server, Tls};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut positional = Vec::new();
    let mut external = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--url" => external = Some(args.next().ok_or("--url needs a URL")?),
            _ => positional.push(a),
        }
    }
    let n: usize = positional.first().map_or(Ok(20_000), |a| a.parse())?;
    let concurrency: usize = positional.get(1).map_or(Ok(32), |a| a.parse())?;
    let module = std::env::var("RL_MODULE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/libredis_ratelimit.so"
        )
        .into()
    });
    // Our own plain and TLS servers (kept until the end), unless a store is named.
    let mut servers = Vec::new();
    let urls = match external {
        Some(url) => vec![(ConnectionSettings::parse(&url)?.redacted(), url)],
        None => {
            let pki = Pki::create(&testkit::scratch_dir("bench-pki")?)?;
            let with_module = |tls: Option<Tls>| Options {
                module: Some((module.clone().into(), vec![])),
                tls,
                ..Options::default()
            };
            let plain = Server::start(with_module(None))?;
            let tls = Server::start(with_module(Some(Tls::new(&pki))))?;
            let urls = vec![
                ("plaintext".to_string(), plain.url()),
                (
                    "TLS".to_string(),
                    format!("{}?ca={}", tls.url(), pki.ca.display()),
                ),
            ];
            servers.extend([plain, tls]);
            urls
        }
    };
    println!("{n} requests per case, 127.0.0.1, one multiplexed connection per store");
    let policy = Policy::gcra(1_000_000_000, 1000);
    for (name, url) in &urls {
        let store = Store::connect(url)
            .await?
            .with_deadline(Duration::from_secs(5));
        // Sequential: one call at a time.
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + 1000 {
            let t = Instant::now();
            store.decide("bench:seq", &policy, 1).await?;
            if i >= 1000 {
                samples.push(t.elapsed());
            }
        }
        report(&format!("{name}: sequential"), &mut samples, None);
        // Concurrent: `concurrency` tasks sharing the connection.
        let started = Instant::now();
        let per_task = n / concurrency.max(1);
        let mut tasks = Vec::new();
        for t in 0..concurrency {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut samples = Vec::with_capacity(per_task);
                for _ in 0..per_task {
                    let at = Instant::now();
                    let _ = store
                        .decide(
                            &format!("bench:c{t}"),
                            &Policy::gcra(1_000_000_000, 1000),
                            1,
                        )
                        .await;
                    samples.push(at.elapsed());
                }
                samples
            }));
        }
        let mut samples = Vec::new();
        for t in tasks {
            samples.extend(t.await?);
        }
        let took = started.elapsed();
        report(
            &format!("{name}: {concurrency} concurrent"),
            &mut samples,
            Some(took),
        );
    }
    Ok(())
}

fn report(name: &str, samples: &mut [Duration], took: Option<Duration>) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1));
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let rate = took.map_or(String::new(), |t| {
        format!("  {:.0} req/s", samples.len() as f64 / t.as_secs_f64())
    });
    println!(
        "{name:<34} p50 {:>7.1} µs  p99 {:>7.1} µs{rate}",
        at(0.50),
        at(0.99)
    );
}
