//! The billing journal across process death: a gateway killed with SIGKILL during an outage
//! (a child process), a shutdown whose charge times out in a stall and lands later, and the next
//! process replaying the journal: the store counts what billing admitted, exactly (up to request
//! checks that timed out and ran later, the documented bound: on a loaded machine a check can
//! reach the server through the test proxy after its deadline).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::{CircuitConfig, Class, Config, Limit, Limiter, ManualClock, Policy, Store};
use support::proxy::{Fault, Proxy};
use support::Server;

fn quota() -> Limit {
    Limit::new(
        "quota",
        Policy::fixed_window(1000, 86_400_000),
        Class::Billing,
    )
}

fn config(clock: Arc<ManualClock>, journal: PathBuf) -> Config {
    Config {
        deadline: Duration::from_millis(100),
        shutdown_deadline: Duration::from_millis(200),
        circuit: CircuitConfig {
            failures: 3,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        },
        clock,
        billing_journal: Some(journal),
        ..Config::default()
    }
}

fn journal_path(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rl-journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Polls until the store counted at least `admitted` on `key`, then checks it counted at most
/// `over` more: request checks that timed out and ran on the server later, or that were sent
/// again after their connection broke (the documented bound; on an idle machine none does,
/// and the count is exact). The ledger's charges never add to it.
async fn wait_counted(s: &Server, key: &str, admitted: i64, over: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let used = 1000 - s.ints(&["RL.PEEK", key])[2];
        if used >= admitted {
            assert!(
                used <= admitted + over as i64,
                "{key}: counted {used} for {admitted} admitted ({over} checks timed out or sent again)"
            );
            return;
        }
        assert!(
            Instant::now() < until,
            "{key}: counted {used}, not {admitted}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The gateway of `a_gateway_killed_during_an_outage_loses_no_billing_count`, run as a child
/// process of this test binary (ignored in a normal run): connects, says `connected`, waits for
/// `go` on stdin, admits `RL_CHILD_N` billing requests on `q:kill`, says `done`, then waits to be
/// killed.
#[test]
#[ignore]
fn child_gateway() {
    let (Ok(url), Ok(journal), Ok(n)) = (
        std::env::var("RL_CHILD_URL"),
        std::env::var("RL_CHILD_JOURNAL"),
        std::env::var("RL_CHILD_N"),
    ) else {
        return;
    };
    let n: usize = n.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        let l = Limiter::new(
            store,
            config(support::manual_clock(), PathBuf::from(journal)),
        );
        println!("connected");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        for _ in 0..n {
            assert!(l.check(&quota(), "q:kill").await.unwrap().allowed);
        }
        println!(
            "done {:?} {}",
            l.unsettled().get("q:kill"),
            l.stats().uncertain()
        );
        std::io::stdout().flush().unwrap();
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_during_an_outage_loses_no_billing_count() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let journal = journal_path("kill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_gateway", "--ignored", "--nocapture"])
        .env("RL_CHILD_URL", proxy.url())
        .env("RL_CHILD_JOURNAL", &journal)
        .env("RL_CHILD_N", "300")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut read_until = |word: &str| loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
        if line.starts_with(word) {
            return line;
        }
    };
    read_until("connected");
    // The outage: every connection dropped, so no call the child makes runs on the server.
    proxy.set(Fault::Drop);
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let done = read_until("done");
    let uncertain: u64 = done.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(done.starts_with("done Some(300) "), "{done}");
    child.kill().unwrap(); // SIGKILL: no shutdown, no flush
    child.wait().unwrap();

    // The next process replays the journal and charges it, once.
    proxy.set(Fault::None);
    let clock = support::manual_clock();
    let l = Limiter::new(
        Store::connect(&s.url()).await.unwrap(),
        config(clock, journal.clone()),
    );
    assert_eq!(l.unsettled().get("q:kill"), Some(&300));
    l.reconcile().await;
    assert!(l.unsettled().is_empty(), "{:?}", l.unsettled());
    wait_counted(&s, "q:kill", 300, uncertain).await;
    assert_eq!(l.shutdown().await.unsettled, 0);
    assert!(!journal.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_that_times_out_at_shutdown_and_lands_later_counts_once() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let journal = journal_path("stall");
    let clock = support::manual_clock();
    let l = Limiter::new(
        Store::connect(&proxy.url()).await.unwrap(),
        config(clock.clone(), journal.clone()),
    );
    assert!(l.check(&quota(), "q:stall").await.unwrap().allowed);
    // An outage in which no call runs: 15 admitted without the store.
    proxy.set(Fault::Drop);
    for _ in 0..15 {
        assert!(l.check(&quota(), "q:stall").await.unwrap().allowed);
    }
    assert_eq!(l.unsettled().get("q:stall"), Some(&15));
    // The store is reachable but stalled at shutdown: the charge is sent, times out, and stays
    // in the journal with its token.
    proxy.set(Fault::None);
    // (Connected again first: a reconnect to a stalled server would hang before sending.)
    let until = Instant::now() + Duration::from_secs(10);
    while l.store().query(&redis::cmd("PING")).await.is_err() {
        assert!(Instant::now() < until, "no reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let uncertain = l.stats().uncertain();
    s.stop();
    let report = l.shutdown().await;
    assert_eq!((report.charged, report.unsettled), (0, 15));
    drop(l);
    // The stall ends: the server runs the queued charge.
    s.resume();
    wait_counted(&s, "q:stall", 16, uncertain).await;
    let used = |s: &Server| 1000 - s.ints(&["RL.PEEK", "q:stall"])[2];
    let landed = used(&s);

    // The next process sends the journal's charge again with its token: counted once.
    let l = Limiter::new(
        Store::connect(&s.url()).await.unwrap(),
        config(clock, journal.clone()),
    );
    assert_eq!(l.unsettled().get("q:stall"), Some(&15));
    l.reconcile().await;
    assert!(l.unsettled().is_empty(), "{:?}", l.unsettled());
    assert_eq!(used(&s), landed, "the replayed charge was counted again");
    // More billing after it is charged normally.
    assert!(l.check(&quota(), "q:stall").await.unwrap().allowed);
    assert_eq!(used(&s), landed + 1);
    assert_eq!(l.shutdown().await.unsettled, 0);
    assert!(!journal.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_an_outage_charges_the_journal_once() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let journal = journal_path("restart");
    let clock = support::manual_clock();
    let url = proxy.url();
    let l = Limiter::new(
        Store::connect(&url).await.unwrap(),
        config(clock.clone(), journal.clone()),
    );
    proxy.set(Fault::Drop);
    for _ in 0..20 {
        l.check(&quota(), "q:restart").await.unwrap();
    }
    // A clean shutdown while the store is still out: all stays in the journal.
    let uncertain = l.stats().uncertain();
    assert_eq!(l.shutdown().await.unsettled, 20);
    drop(l);
    // Started again while the outage goes on (the store is connected, then lost again): the
    // journal's 20 and 5 more are owed.
    proxy.set(Fault::None);
    let l = Limiter::new(
        Store::connect(&url).await.unwrap(),
        Config {
            // Its shutdown must reach the store just after the outage ends, on a loaded
            // machine too.
            shutdown_deadline: Duration::from_secs(5),
            ..config(clock.clone(), journal.clone())
        },
    );
    proxy.set(Fault::Drop);
    for _ in 0..5 {
        l.check(&quota(), "q:restart").await.unwrap();
    }
    assert_eq!(l.unsettled().get("q:restart"), Some(&25));
    proxy.set(Fault::None);
    let report = l.shutdown().await;
    assert_eq!((report.charged, report.unsettled), (25, 0));
    wait_counted(&s, "q:restart", 25, uncertain + l.stats().uncertain()).await;
    assert!(!journal.exists());
}
