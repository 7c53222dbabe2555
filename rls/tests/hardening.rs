//! The attacks of issue 36, each against the built binary `redis-ratelimit-rls` (a process of
//! its own, configured by its environment, its config directory written while it runs): hostile
//! config files, more descriptors than one store call decides, the denial cache's lock-out and
//! its size, and credentials with URL characters. Replies held by Nagle: `nodelay.rs`.

mod support;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::*;
use tonic::transport::Channel;

const GOOD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n";

/// The binary, its stderr in a file beside its config.
struct Binary {
    child: Child,
    root: PathBuf,
    http: u16,
    grpc: u16,
}

fn scratch_root(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let root = std::env::temp_dir().join(format!(
        "rl-rls-hard-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

impl Binary {
    /// Spawns it on `config.yaml` with these variables (over the test's defaults).
    fn spawn(redis_url: &str, yaml: &str, env: &[(&str, &str)]) -> Binary {
        let root = scratch_root("bin");
        write_config(&root, "config.yaml", yaml);
        let (http, grpc) = (free_port(), free_port());
        let log = std::fs::File::create(root.join("stderr.log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-rls"));
        cmd.env_clear()
            .env("HOST", "127.0.0.1")
            .env("PORT", http.to_string())
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", grpc.to_string())
            .env("RUNTIME_ROOT", &root)
            .env("RUNTIME_SUBDIRECTORY", "ratelimit")
            .env("REDIS_SOCKET_TYPE", "tcp")
            .env("REDIS_URL", redis_url)
            .env("RLS_RELOAD_INTERVAL_MS", "20")
            .env("RLS_DEADLINE_MS", "2000")
            .env("LOG_LEVEL", "warn")
            // Our atomic mode, no statsd datagrams, the debug port on loopback.
            .env("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
            .env("USE_STATSD", "false")
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", "0");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        Binary {
            child,
            root,
            http,
            grpc,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("stderr.log")).unwrap_or_default()
    }

    /// Waits until it serves (true) or exits (false).
    async fn serving(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(self.http, "/healthcheck").map(|(s, _)| s) == Some(200) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            assert!(Instant::now() < deadline, "neither serving nor exited");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", self.grpc))
            .await
            .unwrap()
    }

    /// Waits until its log holds `text`, at most 30 s.
    async fn logged(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if log.contains(text) {
                return log;
            }
            assert!(Instant::now() < deadline, "no '{text}' in the log:\n{log}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn write(&self, name: &str, yaml: &str) {
        write_config(&self.root, name, yaml);
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `levels` descriptors each nested in the one before.
fn nested(levels: usize) -> String {
    let mut text = String::from("domain: deep\ndescriptors:\n");
    for i in 0..levels {
        let pad = "  ".repeat(2 * i);
        text += &format!("{pad}- key: k{i}\n{pad}  descriptors:\n");
    }
    text
}

/// Seven levels of ten aliases each: 10^7 nodes once expanded, from under 1 KB.
fn alias_bomb() -> String {
    let mut text = String::from("domain: bomb\nx0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..7 {
        let p = i - 1;
        text += &format!(
            "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        );
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_files_in_a_live_config_directory_are_refused_and_the_last_good_keeps_answering() {
    let redis = Redis::start();
    let mut rls = Binary::spawn(&redis.url(), GOOD, &[]);
    assert!(rls.serving().await, "{}", rls.log());
    let mut client = rls.client().await;
    let hostile = [
        // 1,600 levels overflowed a worker thread's stack on reload (SIGABRT, exit 134).
        (nested(1_600), "RLS_CONFIG_MAX_DEPTH"),
        (alias_bomb(), "RLS_CONFIG_MAX_ALIAS_NODES"),
    ];
    for (yaml, why) in hostile {
        rls.write("hostile.yaml", &yaml);
        let log = rls.logged(why).await;
        assert!(log.contains("keeping the old one"), "{log}");
        assert!(rls.alive(), "the RLS died on a file refused for {why}");
        let r = client
            .should_rate_limit(simple("d", &[&[("k", "x")]]))
            .await
            .unwrap();
        assert_eq!(r.get_ref().overall_code, OK, "{why}");
    }
    // At start too: refused by name, and the server runs on without a config (as the peer,
    // `config_load_error`), never aborting.
    let mut at_start = Binary::spawn(&redis.url(), &nested(1_600), &[]);
    at_start.logged("RLS_CONFIG_MAX_DEPTH").await;
    assert!(at_start.serving().await, "{}", at_start.log());
    assert!(at_start.alive(), "{}", at_start.log());
}

fn many(domain: &str, n: usize) -> RateLimitRequest {
    let values: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    let entries: Vec<[(&str, &str); 1]> = values.iter().map(|v| [("k", v.as_str())]).collect();
    let lists: Vec<&[(&str, &str)]> = entries.iter().map(|e| &e[..]).collect();
    simple(domain, &lists)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_limited_descriptors_than_one_call_decides_are_refused_as_invalid() {
    let redis = Redis::start();
    let mut rls = Binary::spawn(&redis.url(), GOOD, &[]);
    assert!(rls.serving().await, "{}", rls.log());
    let mut client = rls.client().await;
    let r = client.should_rate_limit(many("d", 32)).await.unwrap();
    assert_eq!(r.get_ref().overall_code, OK);
    for n in [33, 10_000] {
        let status = client.should_rate_limit(many("d", n)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("RLS_MAX_DESCRIPTORS"),
            "{status:?}"
        );
    }
    // Only limited descriptors count: 40 that no rule matches are answered.
    let r = client.should_rate_limit(many("nothing", 40)).await.unwrap();
    assert_eq!(r.get_ref().overall_code, OK);
    let mut small = Binary::spawn(&redis.url(), GOOD, &[("RLS_MAX_DESCRIPTORS", "4")]);
    assert!(small.serving().await, "{}", small.log());
    let status = small
        .client()
        .await
        .should_rate_limit(many("d", 5))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_charge_does_not_lock_a_fixed_window_key() {
    let redis = Redis::start();
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";
    let mut rls = Binary::spawn(&redis.url(), yaml, &[]);
    assert!(rls.serving().await, "{}", rls.log());
    let client = rls.client().await;
    let ask = |hits: u64| {
        let mut client = client.clone();
        async move {
            let req = request("d", vec![descriptor(&[("k", "shared")], Some(hits))], 0);
            codes(&client.should_rate_limit(req).await.unwrap().into_inner()).1[0]
        }
    };
    // Above the capacity: denied here, and it says nothing about smaller charges.
    assert_eq!(ask(101).await.0, OVER_LIMIT);
    assert_eq!(ask(1).await, (OK, 99));
    assert_eq!(ask(39).await, (OK, 60));
    // The store denies 61 with 60 left: 61 and more are denied here until the window ends,
    // 60 still goes to the store and is admitted.
    assert_eq!(ask(61).await, (OVER_LIMIT, 0));
    let calls = redis.calls("RL.FIXEDWINDOW");
    assert_eq!(ask(70).await.0, OVER_LIMIT);
    assert_eq!(
        redis.calls("RL.FIXEDWINDOW"),
        calls,
        "70 was answered by the cache"
    );
    assert_eq!(ask(60).await, (OK, 0));
    assert_eq!(redis.calls("RL.FIXEDWINDOW"), calls + 1);
}

/// The resident set of a process, in KB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_denial_cache_keeps_to_its_bytes() {
    let redis = Redis::start();
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let mut rls = Binary::spawn(
        &redis.url(),
        yaml,
        &[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")],
    );
    assert!(rls.serving().await, "{}", rls.log());
    let client = rls.client().await;
    let pad = "x".repeat(4096);
    let ask = |i: usize| {
        let value = format!("{i}{pad}");
        let mut client = client.clone();
        async move {
            let req = simple("d", &[&[("k", value.as_str())]]);
            client
                .should_rate_limit(req)
                .await
                .unwrap()
                .into_inner()
                .overall_code
        }
    };
    // Warm up, then 6,000 unique 4 KB keys each denied by the store once (24 MB of keys).
    for i in 0..200 {
        ask(i).await;
        ask(i).await;
    }
    let before = rss_kb(rls.child.id());
    for i in 200..6_200 {
        assert_eq!(ask(i).await, OK);
        assert_eq!(ask(i).await, OVER_LIMIT);
    }
    let grown = rss_kb(rls.child.id()).saturating_sub(before);
    println!("RSS grew by {grown} KB over 6,000 denied 4 KB keys, cache bound 1 MB");
    assert!(grown < 12 * 1024, "RSS grew by {grown} KB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_with_url_characters_connect_and_are_never_logged() {
    let redis = Redis::start_args(&["--unixsocket", "r.sock", "--unixsocketperm", "700"]);
    let socket = redis.path("r.sock").display().to_string();
    let password = "p@ssw/rd#1?+/=%25";
    let _: String = redis.cmd(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("alice")
            .arg("on")
            .arg(">al:ce p+w")
            .arg("~*")
            .arg("+@all"),
    );
    let _: String = redis.cmd(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(password),
    );
    let cases: [&[(&str, &str)]; 4] = [
        &[("REDIS_AUTH", password)],
        &[("REDIS_AUTH", "alice:al:ce p+w")],
        &[
            ("REDIS_SOCKET_TYPE", "unix"),
            ("REDIS_URL", &socket),
            ("REDIS_AUTH", password),
        ],
        &[
            ("REDIS_SOCKET_TYPE", "unix"),
            ("REDIS_URL", &socket),
            ("REDIS_AUTH", "alice:al:ce p+w"),
        ],
    ];
    for env in cases {
        let mut rls = Binary::spawn(&redis.url(), GOOD, env);
        assert!(rls.serving().await, "{env:?}: {}", rls.log());
        let r = rls
            .client()
            .await
            .should_rate_limit(simple("d", &[&[("k", "x")]]))
            .await
            .unwrap();
        assert_eq!(r.get_ref().overall_code, OK, "{env:?}");
    }
    // A hand-encoded URL with a wrong password: refused, and the line says so, naming the user
    // (a name is no secret: it tells the operator which credential is wrong) but never the
    // password.
    let url = format!("redis://alice:wr%40ng-s3cret@127.0.0.1:{}/", redis.port);
    let mut rls = Binary::spawn(&url, GOOD, &[]);
    assert!(!rls.serving().await);
    let log = rls.log();
    assert!(log.contains("cannot start"), "{log}");
    assert!(log.contains("redis://alice:***@127.0.0.1"), "{log}");
    assert!(log.contains("wrong user name or password"), "{log}");
    assert!(!log.contains("s3cret") && !log.contains("wr%40ng"), "{log}");
}
