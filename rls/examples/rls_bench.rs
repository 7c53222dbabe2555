//! ShouldRateLimit against a raw `RL.ALL` of the same keys: requests/s and p50/p99 at a fixed
//! concurrency, with 1 and 3 descriptors, store commands per request (INFO commandstats); the RLS
//! over TLS beside the RLS in plaintext (side by side, and the ratio of their p99); and the same
//! while the store is frozen (SIGSTOP: the class's fallback answers within the deadline).
//!
//! `make bench-rls` (or `cargo run --release -p redis-ratelimit-rls --example rls_bench --
//! [REQUESTS] [CONCURRENCY]`) starts its own servers on 127.0.0.1 (testkit: one plain, one
//! TLS-only with a harness CA) with `target/release/libredis_ratelimit.so` (`$RL_MODULE`
//! overrides) and the RLS in this process. `--url URL` (`ARGS="--url rediss://user:pass@host:port/?ca=/ca.pem"`,
//! any of the client's URL forms, docs/operating.md) measures against that store instead: the
//! raw and RLS rows only, its password never printed.

use std::process::Command;
use std::time::{Duration, Instant};

use ratelimit_client::{ConnectionSettings, Store};
use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use ratelimit_rls::server;
use ratelimit_rls::settings::Settings;
use testkit::{Options, Pki, Server, Tls};

const CONFIG: &str = "
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000000000, algorithm: gcra}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket}
";

type Bx = Box<dyn std::error::Error>;

fn request(task: usize, n: usize) -> RateLimitRequest {
    let keys = [("client", "c"), ("path", "p"), ("tenant", "t")];
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: keys
            .iter()
            .take(n)
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: k.to_string(),
                    value: format!("{v}{task}"),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

fn raw_all(task: usize, n: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.ALL");
    cmd.arg(n);
    let algos = [
        ("FIXEDWINDOW", 1000u64),
        ("GCRA", 60_000),
        ("TOKENBUCKET", 3_600_000),
    ];
    for i in 0..n {
        cmd.arg(format!("raw:{{bench}}:{i}:{task}"));
    }
    for (algo, w) in algos.iter().take(n) {
        cmd.arg(*algo).arg(1_000_000_000u64).arg(*w);
    }
    cmd
}

/// The `rl.*` calls in the store's commandstats (`None` when the user may not run `INFO`).
async fn commands(store: &Store) -> Option<u64> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("commandstats");
    let info: String = match store.query(&cmd).await.ok()? {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        _ => return None,
    };
    Some(
        info.lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("cmdstat_rl."))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum(),
    )
}

/// Prints one row; returns its p99.
fn report(
    case: &str,
    mut samples: Vec<Duration>,
    wall: Duration,
    store_cmds: Option<f64>,
) -> Duration {
    samples.sort();
    let n = samples.len().max(1);
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    let per = store_cmds.map_or("-".to_string(), |c| format!("{c:.2}"));
    println!(
        "{case:<40} {:>9.0} req/s  p50={:>7.1} µs  p99={:>8.1} µs  store cmds/req={per}",
        n as f64 / wall.as_secs_f64(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
    );
    at(0.99)
}

async fn run_rls(
    url: &str,
    n: usize,
    per_task: usize,
    concurrency: usize,
) -> Result<(Vec<Duration>, Duration), Bx> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut client = RateLimitServiceClient::connect(url.to_string()).await?;
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let s = Instant::now();
                if client.should_rate_limit(request(t, n)).await.is_ok() {
                    out.push(s.elapsed());
                }
            }
            out
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await?);
    }
    Ok((samples, started.elapsed()))
}

async fn run_raw(
    store: &Store,
    n: usize,
    per_task: usize,
    concurrency: usize,
) -> Result<(Vec<Duration>, Duration), Bx> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_task);
            let cmd = raw_all(t, n);
            for _ in 0..per_task {
                let s = Instant::now();
                if store.query(&cmd).await.is_ok() {
                    out.push(s.elapsed());
                }
            }
            out
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await?);
    }
    Ok((samples, started.elapsed()))
}

/// The RLS's settings: this bench's config and `REDIS_URL`, plus `more` (TLS); `RLS_DEADLINE_MS`
/// and the other `RLS_` variables pass through from the environment.
fn rls_settings(root: &str, url: &str, more: &[(&str, String)]) -> Result<Settings, String> {
    let vars = [
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("RUNTIME_ROOT", root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("USE_STATSD", "false"),
        // The atomic mode (one RL.ALL per request), compared with a raw RL.ALL below.
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
    ];
    Settings::from_lookup(|k| {
        more.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .or_else(|| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
            .or_else(|| std::env::var(k).ok().filter(|_| k.starts_with("RLS_")))
    })
}

/// A store connection for the raw rows and commandstats, with a deadline no bench call meets.
async fn store(url: &str) -> Result<Store, Bx> {
    Ok(Store::connect(url)
        .await?
        .with_deadline(Duration::from_secs(5)))
}

#[tokio::main]
async fn main() -> Result<(), Bx> {
    let mut positional = Vec::new();
    let mut external = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--url" => external = Some(args.next().ok_or("--url needs a URL")?),
            _ => positional.push(a),
        }
    }
    let requests: usize = positional.first().map_or(Ok(20_000), |a| a.parse())?;
    let concurrency: usize = positional.get(1).map_or(Ok(16), |a| a.parse())?;
    let per_task = (requests / concurrency).max(1);
    let module = std::env::var("RL_MODULE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/libredis_ratelimit.so"
        )
        .into()
    });
    let dir = testkit::scratch_dir("rls-bench")?;
    std::fs::create_dir_all(dir.join("ratelimit/config"))?;
    std::fs::write(dir.join("ratelimit/config/bench.yaml"), CONFIG)?;
    let root = dir.display().to_string();
    let with_module = |tls: Option<Tls>| Options {
        module: Some((module.clone().into(), vec![])),
        tls,
        ..Options::default()
    };
    // Our own plain and TLS servers, unless a store is named.
    let (plain, secure) = match &external {
        Some(_) => (None, None),
        None => {
            let pki = Pki::create(&testkit::scratch_dir("rls-bench-pki")?)?;
            let plain = Server::start(with_module(None))?;
            let secure = Server::start(with_module(Some(Tls::new(&pki))))?;
            (Some(plain), Some((secure, pki)))
        }
    };
    let url = match (&external, &plain) {
        (Some(url), _) => url.clone(),
        (None, Some(p)) => p.url(),
        (None, None) => return Err("no store".into()),
    };
    let shown = ConnectionSettings::parse(&url)?.redacted();
    let raw = store(&url).await?;
    let settings = rls_settings(&root, &url, &[])?;
    let deadline = settings.deadline;
    let running = server::start(settings).await?;
    let rls_url = format!("http://{}", running.grpc_addr);
    println!(
        "{requests} requests, {concurrency} concurrent clients, {shown}, deadline {deadline:?}"
    );
    // Warm up both paths once.
    let _ = run_raw(&raw, 3, 10, concurrency).await?;
    let _ = run_rls(&rls_url, 3, 10, concurrency).await?;
    for n in [1usize, 3] {
        let before = commands(&raw).await;
        let (s, wall) = run_raw(&raw, n, per_task, concurrency).await?;
        let per = per_request(before, commands(&raw).await, s.len());
        report(&format!("raw RL.ALL, {n} key(s)"), s, wall, per);
        let before = commands(&raw).await;
        let fallbacks = running.service.limiter().stats().fallbacks;
        let (s, wall) = run_rls(&rls_url, n, per_task, concurrency).await?;
        let per = per_request(before, commands(&raw).await, s.len());
        let fell_back = running.service.limiter().stats().fallbacks - fallbacks;
        println!("(fallback decisions, the store missed the deadline: {fell_back})");
        report(&format!("ShouldRateLimit, {n} descriptor(s)"), s, wall, per);
    }
    let (Some(plain), Some((secure, pki))) = (plain, secure) else {
        running.stop().await;
        return Ok(());
    };
    // TLS beside plaintext: a second RLS on the TLS server, the same requests, in turns.
    let tls_settings = rls_settings(
        &root,
        &format!("127.0.0.1:{}", secure.port),
        &[
            ("REDIS_TLS", "true".into()),
            ("REDIS_TLS_CACERT", pki.ca.display().to_string()),
        ],
    )?;
    let tls_running = server::start(tls_settings).await?;
    let tls_url = format!("http://{}", tls_running.grpc_addr);
    let _ = run_rls(&tls_url, 3, 10, concurrency).await?;
    for n in [1usize, 3] {
        let (s, wall) = run_rls(&rls_url, n, per_task, concurrency).await?;
        let plain_p99 = report(&format!("ShouldRateLimit, {n}, plaintext"), s, wall, None);
        let (s, wall) = run_rls(&tls_url, n, per_task, concurrency).await?;
        let tls_p99 = report(&format!("ShouldRateLimit, {n}, TLS"), s, wall, None);
        println!(
            "(TLS/plaintext p99: {:.2}x)",
            tls_p99.as_secs_f64() / plain_p99.as_secs_f64().max(1e-9)
        );
    }
    tls_running.stop().await;
    // Frozen: the limiter's deadline, then the circuit, answer for the store.
    let pid = plain.pid().ok_or("the server is not running")?.to_string();
    Command::new("kill").args(["-STOP", &pid]).status()?;
    for n in [1usize, 3] {
        let (s, wall) = run_rls(&rls_url, n, per_task.min(2_000), concurrency).await?;
        report(
            &format!("ShouldRateLimit, {n}, store frozen"),
            s,
            wall,
            None,
        );
    }
    Command::new("kill").args(["-CONT", &pid]).status()?;
    let stopped = running.stop().await;
    println!("shutdown: {stopped:?}");
    drop(plain);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Store commands per request between two commandstats readings.
fn per_request(before: Option<u64>, after: Option<u64>, requests: usize) -> Option<f64> {
    Some(after?.saturating_sub(before?) as f64 / requests.max(1) as f64)
}
