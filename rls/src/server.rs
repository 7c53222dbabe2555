//! The running server: the config loaded and watched, the store connected, gRPC (the rate limit
//! service and `grpc.health.v1`) and the HTTP port listening, and a clean stop: health goes to
//! NOT_SERVING, requests in flight finish, leased tokens are refunded and billing counts charged.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use ratelimit_client::{
    Algorithm, Clock, ConnectionSettings, Limiter, Policy, ShutdownReport, Store, SystemClock,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic_health::server::HealthReporter;

use crate::config::Config;
use crate::grpc::Grpc;
use crate::health::Health;
use crate::http;
use crate::listen::{self, GrpcAddr};
use crate::service::Service;
use crate::settings::Settings;
use crate::{files, load, statsd};

pub struct Running {
    pub grpc_addr: GrpcAddr,
    pub http_addr: std::net::SocketAddr,
    pub debug_addr: std::net::SocketAddr,
    pub service: Arc<Service>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<ShutdownReport>,
}

impl Running {
    /// Stops as on SIGTERM and waits for the end.
    pub async fn stop(mut self) -> ShutdownReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap_or_default()
    }

    /// Waits until the server stops (after `stop_on_signals` saw a signal).
    pub async fn wait(self) -> ShutdownReport {
        self.task.await.unwrap_or_default()
    }

    /// SIGTERM or SIGINT stop the server.
    pub fn stop_on_signals(&mut self) {
        let Some(stop) = self.stop.take() else { return };
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                log::error!("cannot listen for SIGTERM/SIGINT");
                return;
            };
            tokio::select! {
                _ = term.recv() => log::warn!("SIGTERM: shutting down"),
                _ = int.recv() => log::warn!("SIGINT: shutting down"),
            }
            let _ = stop.send(());
        });
    }
}

/// Reads and checks the config files.
pub fn load_config(settings: &Settings) -> Result<(Config, files::Files), String> {
    let files = files::read(&settings.config_dir(), settings.runtime_ignore_dotfiles)?;
    let config = load::load(&files, settings.merge_domain_config, settings.yaml_limits)
        .map_err(|e| e.to_string())?;
    Ok((config, files))
}

/// Connects to one store and checks at start that its ACL user may run what the RLS sends
/// (a peek of each algorithm the config uses, on a key under the RLS's prefix): a wrong
/// password, an untrusted certificate or a missing permission stops the start, naming it.
pub async fn connect_to(
    settings: &ConnectionSettings,
    prefix: &str,
    config: Option<&Config>,
    load: ratelimit_client::LoadLibrary,
) -> Result<Store, String> {
    let place = settings.redacted();
    let store = Store::open_with(settings, load)
        .await
        .map_err(|e| format!("the store {place}: {e}"))?;
    let key = format!("{prefix}rls:{{access-check}}:");
    let algorithms = config.map_or_else(|| vec![Algorithm::Gcra], Config::algorithms);
    for algorithm in algorithms {
        let policy = Policy {
            algorithm,
            ..Policy::gcra(1, 1000)
        };
        store
            .check_access(&format!("{key}{}", algorithm.name()), &policy)
            .await
            .map_err(|e| format!("the store {place}: {e}"))?;
    }
    if config.is_some_and(Config::has_concurrency) {
        // A PEEK writes nothing and creates no key.
        let peek = ratelimit_client::SlotOp::Peek;
        let checking = store
            .clone()
            .with_deadline(ratelimit_client::store::START_DEADLINE);
        if let Err(ratelimit_client::Error::Config(why)) = checking
            .concurrency(&format!("{key}CONCURRENCY"), 1, 1000, peek)
            .await
        {
            return Err(format!(
                "the store {place}: CONCURRENCY refused: {why} (docs/operating.md gives the \
                 minimal ACL rule)"
            ));
        }
    }
    log::warn!("store {place}: the {} backend", store.backend().name());
    Ok(store)
}

/// [`connect_to`], retried while the store does not answer, as the peer retries at start: the
/// wait starts at REDIS_STARTUP_INITIAL_INTERVAL and doubles up to REDIS_STARTUP_MAX_INTERVAL,
/// until REDIS_STARTUP_MAX_ELAPSED_TIME has passed (0: forever). A refusal no retry fixes (a
/// wrong password, an untrusted certificate, a missing permission) is not retried.
async fn connect_with_retry(
    settings: &Settings,
    store: &ConnectionSettings,
    config: Option<&Config>,
) -> Result<Store, String> {
    let started = std::time::Instant::now();
    let mut wait = settings.redis_startup_initial;
    let mut tries = 1u32;
    loop {
        match connect_to(
            store,
            &settings.cache_key_prefix,
            config,
            settings.load_library,
        )
        .await
        {
            Ok(store) => return Ok(store),
            Err(e) if is_refused(&e) => return Err(e),
            Err(e) => {
                let limit = settings.redis_startup_max_elapsed;
                if !limit.is_zero() && started.elapsed() + wait > limit {
                    return Err(format!("{e} (given up after {tries} tries)"));
                }
                log::warn!(
                    "the store does not answer at start (try {tries}), again in {wait:?}: {e}"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(settings.redis_startup_max_interval.max(wait));
                tries += 1;
            }
        }
    }
}

/// A start refused for its configuration (the client's `Error::Config`: `WRONGPASS`, `NOPERM`,
/// a certificate not trusted, a file not read), or the store's own words for one.
fn is_refused(error: &str) -> bool {
    [
        "configuration:",
        "WRONGPASS",
        "NOAUTH",
        "NOPERM",
        "invalid username-password",
    ]
    .iter()
    .any(|code| error.contains(code))
}

/// Starts everything on the settings' ports (0: any free one) with the system clock.
pub async fn start(settings: Settings) -> Result<Running, String> {
    start_with_clock(settings, Arc::new(SystemClock::new())).await
}

/// As [`start`], with the clock of the limiter and the denial cache (tests move it by hand).
/// A config that does not load at start is logged and counted (`config_load_error`) and the
/// server runs on without one, as the peer does, until a good one is written.
pub async fn start_with_clock(
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Result<Running, String> {
    let loaded = load_config(&settings);
    let (config, files, loaded_ok) = match loaded {
        Ok((config, files)) => {
            log::info!(
                "config loaded: {} file(s), {} domain(s)",
                files.len(),
                config.domains.len()
            );
            (Some(config), files, true)
        }
        Err(e) => {
            log::error!("error loading initial configuration, serving without one: {e}");
            // The files as read, so that the same bad files are not loaded again and again.
            let files = files::read(&settings.config_dir(), settings.runtime_ignore_dotfiles)
                .unwrap_or_default();
            (None, files, false)
        }
    };
    let store = connect_with_retry(&settings, &settings.redis.main, config.as_ref()).await?;
    let backend = store.backend().name();
    let per_second = match &settings.redis.per_second {
        Some(s) => Some(connect_with_retry(&settings, s, config.as_ref()).await?),
        None => None,
    };
    let limiter_config = ratelimit_client::Config {
        deadline: settings.deadline,
        gateways: settings.gateways,
        clock: clock.clone(),
        billing_journal: settings.billing_journal.clone(),
        ..ratelimit_client::Config::default()
    };
    let limiter = Limiter::new(store, limiter_config.clone());
    let settings = Arc::new(settings);
    let mut service = Service::new(limiter, settings.clone(), clock, config);
    if let Some(store) = per_second {
        // The billing journal is the main store's: one path per process.
        let config = ratelimit_client::Config {
            billing_journal: None,
            ..limiter_config
        };
        service = service.with_per_second(Limiter::new(store, config));
    }
    let service = Arc::new(service);
    let health = Arc::new(Health::new(settings.healthy_with_config));
    service.metrics.set_backend(backend);
    service.metrics.service(
        if loaded_ok {
            "config_load_success"
        } else {
            "config_load_error"
        },
        1,
    );
    if service.has_config() && !service.config().domains.is_empty() {
        health.config_loaded();
    }

    let grpc_incoming = listen::grpc(&settings).await?;
    let grpc_addr = grpc_incoming.local_addr();
    let http_listener = TcpListener::bind((settings.host.as_str(), settings.port))
        .await
        .map_err(|e| format!("HTTP {}:{}: {e}", settings.host, settings.port))?;
    let http_addr = http_listener.local_addr().map_err(|e| e.to_string())?;

    let debug_listener = TcpListener::bind((settings.debug_host.as_str(), settings.debug_port))
        .await
        .map_err(|e| format!("DEBUG {}:{}: {e}", settings.debug_host, settings.debug_port))?;
    let debug_addr = debug_listener.local_addr().map_err(|e| e.to_string())?;
    let max = settings.http_max_request_bytes;
    let mut http_tasks = vec![
        tokio::spawn(http::serve(
            http_listener,
            http::Port::Main,
            service.clone(),
            health.clone(),
            max,
        )),
        tokio::spawn(http::serve(
            debug_listener,
            http::Port::Debug,
            service.clone(),
            health.clone(),
            max,
        )),
    ];
    if settings.use_prometheus {
        let addr = settings.prometheus_addr.clone();
        let addr = if addr.starts_with(':') {
            format!("0.0.0.0{addr}")
        } else {
            addr
        };
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("PROMETHEUS_ADDR {addr}: {e}"))?;
        http_tasks.push(tokio::spawn(http::serve(
            listener,
            http::Port::Prometheus,
            service.clone(),
            health.clone(),
            max,
        )));
    }
    let statsd_task = statsd::spawn(&settings, service.metrics.clone());
    let (reporter, health_service) = tonic_health::server::health_reporter();
    health.report(&reporter).await;
    let reload_task = tokio::spawn(watch(
        service.clone(),
        settings.clone(),
        files,
        health.clone(),
        reporter.clone(),
    ));

    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (grpc_stop_tx, grpc_stop_rx) = oneshot::channel::<()>();
    let grpc = tonic::transport::Server::builder()
        .max_connection_age(settings.grpc_max_connection_age)
        .max_connection_age_grace(settings.grpc_max_connection_age_grace)
        .add_service(health_service)
        .add_service(RateLimitServiceServer::from_arc(Arc::new(Grpc(
            service.clone(),
        ))));
    let grpc_task = tokio::spawn(grpc_incoming.serve(grpc, async {
        let _ = grpc_stop_rx.await;
    }));
    log::warn!("serving gRPC on {grpc_addr}, HTTP on {http_addr}, debug on {debug_addr}");

    let svc = service.clone();
    let task = tokio::spawn(async move {
        let _ = stop_rx.await;
        health.stopping();
        health.report(&reporter).await;
        // Stop accepting, let requests in flight finish, then settle with the store.
        let _ = grpc_stop_tx.send(());
        if let Ok(Err(e)) = grpc_task.await {
            log::error!("gRPC server: {e}");
        }
        reload_task.abort();
        for t in http_tasks.into_iter().chain(statsd_task) {
            t.abort();
        }
        let mut report = svc.limiter().shutdown().await;
        if let Some(l) = svc.per_second() {
            let second = l.shutdown().await;
            report.refunded += second.refunded;
            report.charged += second.charged;
            report.unsettled += second.unsettled;
        }
        log::warn!(
            "stopped: {} leased token(s) refunded, {} billing count(s) charged, {} unsettled",
            report.refunded,
            report.charged,
            report.unsettled
        );
        report
    });
    Ok(Running {
        grpc_addr,
        http_addr,
        debug_addr,
        service,
        stop: Some(stop_tx),
        task,
    })
}

/// Re-reads the config directory every interval; a changed set of files is loaded and swapped
/// in whole, or refused whole with the reason logged (the old config stays). Each tick also
/// brings health up to date (the store's part with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
async fn watch(
    service: Arc<Service>,
    settings: Arc<Settings>,
    mut last: files::Files,
    health: Arc<Health>,
    reporter: HealthReporter,
) {
    let mut tick = tokio::time::interval(settings.reload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = health.ok();
    loop {
        tick.tick().await;
        if settings.redis_health_follows_store {
            health.store_answers(!service.limiter().circuit_open());
        }
        match files::read(&settings.config_dir(), settings.runtime_ignore_dotfiles) {
            Err(e) => log::error!("config not reloaded: {e}"),
            Ok(files) if files == last => {}
            Ok(files) => {
                match load::load(&files, settings.merge_domain_config, settings.yaml_limits) {
                    Ok(config) => {
                        if !config.domains.is_empty() {
                            health.config_loaded();
                        }
                        service.replace_config(config);
                        service.metrics.service("config_load_success", 1);
                        log::warn!("config reloaded: {} file(s)", files.len());
                    }
                    Err(e) => {
                        service.metrics.service("config_load_error", 1);
                        log::error!("error loading new configuration, keeping the old one: {e}");
                    }
                }
                last = files;
            }
        }
        if health.ok() != reported {
            reported = health.ok();
            health.report(&reporter).await;
        }
    }
}
