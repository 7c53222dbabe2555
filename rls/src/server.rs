//! The running server: the config loaded and watched, the store connected, gRPC (the rate limit
//! service and `grpc.health.v1`) and the HTTP port listening, and a clean stop: health goes to
//! NOT_SERVING, requests in flight finish, leased tokens are refunded and billing counts charged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use ratelimit_client::{
    Clock, ConnectionSettings, Limiter, Policy, ShutdownReport, Store, SystemClock,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::grpc::Grpc;
use crate::http::{self, Health};
use crate::service::Service;
use crate::settings::Settings;
use crate::{files, load};

pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
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
    let config = load::load(&files, settings.merge_domain_config).map_err(|e| e.to_string())?;
    Ok((config, files))
}

/// Connects to one store and checks at start that its ACL user may run what the RLS sends
/// (a peek of each algorithm the config uses, on a key under the RLS's prefix): a wrong
/// password, an untrusted certificate or a missing permission stops the start, naming it.
pub async fn connect_to(
    settings: &ConnectionSettings,
    prefix: &str,
    config: &Config,
) -> Result<Store, String> {
    let place = settings.redacted();
    let store = Store::open(settings)
        .await
        .map_err(|e| format!("the store {place}: {e}"))?;
    let key = format!("{prefix}rls:{{access-check}}:");
    for algorithm in config.algorithms() {
        let policy = Policy {
            algorithm,
            ..Policy::gcra(1, 1000)
        };
        store
            .check_access(&format!("{key}{}", algorithm.name()), &policy)
            .await
            .map_err(|e| format!("the store {place}: {e}"))?;
    }
    log::warn!("store {place}: {:?} backend", store.backend());
    Ok(store)
}

/// Starts everything on the settings' ports (0: any free one) with the system clock.
pub async fn start(settings: Settings) -> Result<Running, String> {
    start_with_clock(settings, Arc::new(SystemClock::new())).await
}

/// As [`start`], with the clock of the limiter and the denial cache (tests move it by hand).
pub async fn start_with_clock(
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Result<Running, String> {
    let (config, files) = load_config(&settings)?;
    log::info!(
        "config loaded: {} file(s), {} domain(s)",
        files.len(),
        config.domains.len()
    );
    let prefix = &settings.cache_key_prefix;
    let store = connect_to(&settings.redis.main, prefix, &config).await?;
    let per_second = match &settings.redis.per_second {
        Some(s) => Some(connect_to(s, prefix, &config).await?),
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

    let grpc_listener = TcpListener::bind((settings.grpc_host.as_str(), settings.grpc_port))
        .await
        .map_err(|e| format!("GRPC {}:{}: {e}", settings.grpc_host, settings.grpc_port))?;
    let http_listener = TcpListener::bind((settings.host.as_str(), settings.port))
        .await
        .map_err(|e| format!("HTTP {}:{}: {e}", settings.host, settings.port))?;
    let grpc_addr = grpc_listener.local_addr().map_err(|e| e.to_string())?;
    let http_addr = http_listener.local_addr().map_err(|e| e.to_string())?;

    let health = Arc::new(Health {
        serving: AtomicBool::new(true),
    });
    let metrics = service.metrics.clone();
    let http_task = tokio::spawn(http::serve(
        http_listener,
        metrics.clone(),
        health.clone(),
        settings.prometheus_path.clone(),
    ));
    let prometheus_task = if settings.use_prometheus {
        let addr = settings.prometheus_addr.clone();
        let addr = if addr.starts_with(':') {
            format!("0.0.0.0{addr}")
        } else {
            addr
        };
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("PROMETHEUS_ADDR {addr}: {e}"))?;
        Some(tokio::spawn(http::serve(
            listener,
            metrics,
            health.clone(),
            settings.prometheus_path.clone(),
        )))
    } else {
        None
    };
    let reload_task = tokio::spawn(watch(service.clone(), settings.clone(), files));

    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter.set_serving::<RateLimitServiceServer<Grpc>>().await;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (grpc_stop_tx, grpc_stop_rx) = oneshot::channel::<()>();
    let grpc = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::from_arc(Arc::new(Grpc(
            service.clone(),
        ))))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc_listener),
            async {
                let _ = grpc_stop_rx.await;
            },
        );
    let grpc_task = tokio::spawn(grpc);
    log::warn!("serving gRPC on {grpc_addr}, HTTP on {http_addr}");

    let svc = service.clone();
    let task = tokio::spawn(async move {
        let _ = stop_rx.await;
        health.serving.store(false, Ordering::Relaxed);
        reporter
            .set_not_serving::<RateLimitServiceServer<Grpc>>()
            .await;
        // Stop accepting, let requests in flight finish, then settle with the store.
        let _ = grpc_stop_tx.send(());
        if let Ok(Err(e)) = grpc_task.await {
            log::error!("gRPC server: {e}");
        }
        reload_task.abort();
        http_task.abort();
        if let Some(t) = prometheus_task {
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
        service,
        stop: Some(stop_tx),
        task,
    })
}

/// Re-reads the config directory every interval; a changed set of files is loaded and swapped
/// in whole, or refused whole with the reason logged (the old config stays).
async fn watch(service: Arc<Service>, settings: Arc<Settings>, mut last: files::Files) {
    let mut tick = tokio::time::interval(settings.reload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let files = match files::read(&settings.config_dir(), settings.runtime_ignore_dotfiles) {
            Ok(f) => f,
            Err(e) => {
                log::error!("config not reloaded: {e}");
                continue;
            }
        };
        if files == last {
            continue;
        }
        match load::load(&files, settings.merge_domain_config) {
            Ok(config) => {
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
