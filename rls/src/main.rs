//! `redis-ratelimit-rls`: configured by the environment as envoyproxy/ratelimit is (docs/envoy.md).

use ratelimit_rls::{logging, server, settings::Settings};

#[tokio::main]
async fn main() {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redis-ratelimit-rls: {e}");
            std::process::exit(2);
        }
    };
    logging::init(&settings.log_level, &settings.log_format);
    for line in Settings::ignored(|k| std::env::var(k).ok()) {
        log::warn!("{line}");
    }
    let mut running = match server::start(settings).await {
        Ok(r) => r,
        Err(e) => {
            log::error!("cannot start: {e}");
            eprintln!("redis-ratelimit-rls: {e}");
            std::process::exit(1);
        }
    };
    running.stop_on_signals();
    // What could not be settled with the store is logged by the shutdown itself.
    running.wait().await;
}
