//! ShouldRateLimit against a raw `RL.ALL` of the same keys: requests/s and p50/p99 at a fixed
//! concurrency, with 1 and 3 descriptors, store commands per request (INFO commandstats), and the
//! same while the store is frozen (SIGSTOP: the class's fallback answers within the deadline).
//!
//! `make bench-rls` (or `cargo run --release -p redis-ratelimit-rls --example rls_bench --
//! [REQUESTS] [CONCURRENCY]`) starts its own redis-server on 127.0.0.1 with
//! `target/release/libredis_ratelimit.so` (`$RL_MODULE` overrides) and the RLS in this process.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use ratelimit_rls::server;
use ratelimit_rls::settings::Settings;

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

fn free_port() -> Result<u16, Bx> {
    Ok((61_000..65_000)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .ok_or("no free port")?)
}

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

fn commands(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .unwrap_or_default();
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
        .sum()
}

fn report(case: &str, mut samples: Vec<Duration>, wall: Duration, store_cmds: Option<f64>) {
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
    conn: &redis::aio::MultiplexedConnection,
    n: usize,
    per_task: usize,
    concurrency: usize,
) -> Result<(Vec<Duration>, Duration), Bx> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_task);
            let cmd = raw_all(t, n);
            for _ in 0..per_task {
                let s = Instant::now();
                let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
                if r.is_ok() {
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

#[tokio::main]
async fn main() -> Result<(), Bx> {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let concurrency: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let per_task = (requests / concurrency).max(1);
    let module = std::env::var("RL_MODULE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/libredis_ratelimit.so"
        )
        .into()
    });
    let port = free_port()?;
    let dir = std::env::temp_dir().join(format!("rl-rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("ratelimit/config"))?;
    std::fs::write(dir.join("ratelimit/config/bench.yaml"), CONFIG)?;
    let mut redis_server = Command::new("redis-server")
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
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut sync = loop {
        if let Ok(mut c) = client.get_connection() {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                break c;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let conn = client.get_multiplexed_async_connection().await?;
    let root = dir.display().to_string();
    let url = format!("127.0.0.1:{port}");
    let vars = [
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("RUNTIME_ROOT", root.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("USE_STATSD", "false"),
        // The atomic mode (one RL.ALL per request), compared with a raw RL.ALL below.
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
    ];
    // RLS_DEADLINE_MS and the other RLS_ variables pass through from the environment.
    let settings = Settings::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
            .or_else(|| std::env::var(k).ok().filter(|_| k.starts_with("RLS_")))
    })?;
    let deadline = settings.deadline;
    let running = server::start(settings).await?;
    let rls_url = format!("http://{}", running.grpc_addr);
    println!(
        "{requests} requests, {concurrency} concurrent clients, 127.0.0.1, deadline {deadline:?}"
    );
    // Warm up both paths once.
    let _ = run_raw(&conn, 3, 10, concurrency).await?;
    let _ = run_rls(&rls_url, 3, 10, concurrency).await?;
    for n in [1usize, 3] {
        let before = commands(&mut sync);
        let (s, wall) = run_raw(&conn, n, per_task, concurrency).await?;
        let per = (commands(&mut sync) - before) as f64 / s.len().max(1) as f64;
        report(&format!("raw RL.ALL, {n} key(s)"), s, wall, Some(per));
        let before = commands(&mut sync);
        let fallbacks = running.service.limiter().stats().fallbacks;
        let (s, wall) = run_rls(&rls_url, n, per_task, concurrency).await?;
        let per = (commands(&mut sync) - before) as f64 / s.len().max(1) as f64;
        let fell_back = running.service.limiter().stats().fallbacks - fallbacks;
        println!("(fallback decisions, the store missed the deadline: {fell_back})");
        report(
            &format!("ShouldRateLimit, {n} descriptor(s)"),
            s,
            wall,
            Some(per),
        );
    }
    // Frozen: the limiter's deadline, then the circuit, answer for the store.
    let pid = redis_server.id().to_string();
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
    redis_server.kill()?;
    let _ = redis_server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
