//! `redis-ratelimit-regions --config FILE`: runs the budget controller (docs/regions.md).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratelimit_regions::{Config, Controller};

const HELP: &str = "\
redis-ratelimit-regions: splits each key's global limit into per-region shares by demand

Usage: redis-ratelimit-regions --config FILE [--once]

  --config FILE   the TOML configuration (regions, keys with L, W, B and algorithm, period)
  --once          run one period and exit (a restarted controller learns first: see docs)
  --help          this text

Every period it prints one line of metrics: period duration, keys moved, keys refreshed,
shares written, raises capped, keys found and forgotten (key patterns), unreachable regions.
See docs/regions.md.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{HELP}");
        return;
    }
    let config = match args.iter().position(|a| a == "--config") {
        Some(i) => args.get(i + 1),
        None => None,
    };
    let Some(path) = config else {
        eprintln!("--config FILE is required\n\n{HELP}");
        std::process::exit(2);
    };
    let config = std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|text| Config::parse(&text).map_err(|e| format!("{path}: {e}")));
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let once = args.iter().any(|a| a == "--once");
    let period = Duration::from_millis(config.period_ms);
    let mut controller = match Controller::new(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    loop {
        let began = Instant::now();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let r = controller.period(now_ms);
        println!(
            "period_ms={} compute_ms={} keys_moved={} keys_refreshed={} shares_written={} raises_capped={} keys_found={} keys_forgotten={} unreachable={}",
            r.duration.as_millis(),
            r.compute.as_millis(),
            r.keys_moved,
            r.keys_refreshed,
            r.shares_written,
            r.raises_capped,
            r.keys_found,
            r.keys_forgotten,
            r.unreachable.join(",")
        );
        for cause in &r.causes {
            eprintln!("unreachable: {cause}");
        }
        if once {
            return;
        }
        std::thread::sleep(period.saturating_sub(began.elapsed()));
    }
}
