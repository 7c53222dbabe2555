//! The login guard under attack: a measured simulation on a real redis-server with the module and
//! its debug clock. Simulated time moves in ticks (the server's clock by `RL.DEBUG CLOCK ADVANCE`,
//! the guard's by hand), so minutes of attack run in seconds; every attempt is a real
//! `LoginGuard::before` (and `after` when the password is checked) against the store.
//!
//! Each attack runs on an empty store with legitimate users beside it (1,000 accounts, 80 % of
//! logins from a trusted device, 10 % typos, retrying after each answer), starting a minute before
//! the attack, and the owner of one attacked account logging in every 10 s from a trusted device
//! and, 5 s later, from a new one (solving the challenge when asked). Attackers never solve a
//! challenge. The attacks (docs/login.md, "Measured"):
//!
//! - `stuffing`: 100,000 attempts, each from its own IPv6 /64, 10 on each of 10,000 accounts, at
//!   1,000/s; each bot tries once and moves on.
//! - `stuffing_solving_challenges`: the same by bots that solve every challenge (a CAPTCHA-solving
//!   service), so that only the strict tier's limits stand in the way.
//! - `spraying`: 5 passwords on each of the 10,000 accounts from 1,000 IPv4 /24s, at 500/s.
//! - `lockout`: 10,000 failures on one account from 1,000 IPv6 /64s at 100/s, answers ignored.
//! - `slow_brute_force`: one address, one account, an attempt every 30 s for 30 minutes (below the
//!   per-network limit of 50 in 15 minutes).
//! - `none`: the legitimate users alone, a minute.
//!
//! It ends with one line per attack: `attack=<name> evaluated=<n>/<attempts>
//! signal_after_s=<s or -> owner_trusted_ok=<n>/<n> owner_new_device_ok=<n>/<n>
//! legit_p99_added_ms=<n>`. `make bench-login` runs it; `-- --scale K` divides the attacks'
//! sizes and rates by K (a quick look), `RL_MODULE` names the module (default
//! `target/release/libredis_ratelimit.so`). `--url` is refused: the debug clock is not a store's.

mod sim;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Instant;

use ratelimit_client::ConnectionSettings;
use sim::{Attack, Report};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut scale = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => scale = args.next().ok_or("--scale K")?.parse()?,
            // Parsed by the connection layer so that a malformed URL gets its own error; a good
            // one is refused all the same (the error never holds the password).
            "--url" => {
                let url = args.next().ok_or("--url needs a URL")?;
                let store = ConnectionSettings::parse(&url)?.redacted();
                return Err(format!(
                    "--url {store}: the login bench cannot run against a store of yours: it moves \
                     the module's debug clock (RL.DEBUG CLOCK ADVANCE, a module loaded with \
                     DEBUG-CLOCK yes) to run minutes of attack in seconds, so it starts its own \
                     redis-server"
                )
                .into());
            }
            other => return Err(format!("unknown argument {other:?}: --scale K").into()),
        }
    }
    if scale == 0 {
        return Err("--scale must be at least 1".into());
    }
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
    let dir = std::env::temp_dir().join(format!("rl-login-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut server = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &dir.display().to_string()])
        .args(["--loadmodule", &module, "DEBUG-CLOCK", "yes"])
        .stdout(Stdio::null())
        .spawn()?;
    let url = format!("redis://127.0.0.1:{port}/");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(&url, scale));
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let reports = result?;
    for r in &reports {
        println!("{}", r.line());
    }
    Ok(())
}

async fn run(url: &str, scale: u64) -> Result<Vec<Report>, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let client = redis::Client::open(url)?;
    let mut conn = loop {
        match client.get_multiplexed_async_connection().await {
            Ok(c) => break c,
            Err(_) if started.elapsed().as_secs() < 10 => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!(
        "# make bench-login, scale 1/{scale}: attacks beside legitimate users on the debug clock"
    );
    let mut reports = Vec::new();
    for attack in Attack::ALL {
        let t = Instant::now();
        let r = sim::simulate(url, &mut conn, attack, scale).await?;
        println!("{}  ({:.1} s)", r.detail(), t.elapsed().as_secs_f64());
        reports.push(r);
    }
    println!("# total {:.1} s", started.elapsed().as_secs_f64());
    Ok(reports)
}
