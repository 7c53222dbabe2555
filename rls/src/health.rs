//! Health as the peer keeps it: healthy while every component is — the store (answered at
//! start; with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, not while the client's circuit is open),
//! the config (only with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: once a config with a domain
//! has loaded) and the process (until SIGTERM). `GET /healthcheck` reads it; the gRPC health
//! service reports it for the empty service name, `ratelimit` (the peer's) and the rate limit
//! service's own name.

use std::sync::atomic::{AtomicBool, Ordering};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::grpc::Grpc;

pub struct Health {
    serving: AtomicBool,
    config: AtomicBool,
    store: AtomicBool,
}

/// The gRPC service names health is reported for, beside the empty one.
pub const PEER_SERVICE_NAME: &str = "ratelimit";

impl Health {
    /// `config_required`: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED (the config component starts
    /// failed).
    pub fn new(config_required: bool) -> Health {
        Health {
            serving: AtomicBool::new(true),
            config: AtomicBool::new(!config_required),
            store: AtomicBool::new(true),
        }
    }

    pub fn ok(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
            && self.config.load(Ordering::Relaxed)
            && self.store.load(Ordering::Relaxed)
    }

    pub fn stopping(&self) {
        self.serving.store(false, Ordering::Relaxed);
    }

    pub fn config_loaded(&self) {
        self.config.store(true, Ordering::Relaxed);
    }

    pub fn store_answers(&self, answers: bool) {
        self.store.store(answers, Ordering::Relaxed);
    }

    /// Tells the gRPC health service the current state.
    pub async fn report(&self, reporter: &HealthReporter) {
        let status = if self.ok() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in ["", PEER_SERVICE_NAME] {
            reporter.set_service_status(name, status).await;
        }
        match status {
            ServingStatus::Serving => reporter.set_serving::<RateLimitServiceServer<Grpc>>().await,
            _ => {
                reporter
                    .set_not_serving::<RateLimitServiceServer<Grpc>>()
                    .await
            }
        }
    }
}
