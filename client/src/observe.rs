//! What the client reports: metrics through the `metrics` facade (any exporter the gateway
//! installs) and a sampled decision log.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `ratelimit_client_decisions_total` | counter | `limit`, `class`, `source` (store, lease, fallback), `allowed` |
//! | `ratelimit_client_decision_seconds` | histogram | `class`, `source`: the time the check added |
//! | `ratelimit_client_fallback_total` | counter | `limit`, `class`, `reason` (timeout, unreachable, unavailable, circuit_open) |
//! | `ratelimit_client_store_seconds` | histogram | — : one store call's round trip |
//! | `ratelimit_client_store_errors_total` | counter | `kind` (timeout, unreachable, …) |

use std::sync::Arc;
use std::time::Duration;

use crate::command::{Algorithm, Class, Decision, Source};

/// One sampled decision: the key type (the limit's name, never the key), what was decided and
/// how the store answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub limit: String,
    pub class: Class,
    pub algorithm: Algorithm,
    pub allowed: bool,
    pub remaining: u64,
    pub source: Source,
    /// The store call's round trip, when one was made.
    pub store_latency: Option<Duration>,
    /// "ok", or why the store did not decide (`Error::kind`).
    pub status: &'static str,
}

pub type LogSink = Arc<dyn Fn(&LogRecord) + Send + Sync>;

/// The default sink: one `log` line (target `ratelimit_client::decision`).
pub fn log_sink() -> LogSink {
    Arc::new(|r: &LogRecord| {
        log::info!(
            target: "ratelimit_client::decision",
            "limit={} class={} algorithm={} allowed={} remaining={} source={} store_us={} status={}",
            r.limit,
            r.class.name(),
            r.algorithm.name(),
            r.allowed,
            r.remaining,
            r.source.name(),
            r.store_latency.map_or(-1, |d| i64::try_from(d.as_micros()).unwrap_or(-1)),
            r.status
        )
    })
}

pub(crate) fn decision(
    limit: &str,
    class: Class,
    d: &Decision,
    took: Duration,
    status: &'static str,
) {
    let c = class.name();
    metrics::counter!(
        "ratelimit_client_decisions_total",
        "limit" => limit.to_string(),
        "class" => c,
        "source" => d.source.name(),
        "allowed" => if d.allowed { "true" } else { "false" }
    )
    .increment(1);
    metrics::histogram!("ratelimit_client_decision_seconds", "class" => c, "source" => d.source.name())
        .record(took.as_secs_f64());
    if let Source::Fallback(_) = d.source {
        metrics::counter!(
            "ratelimit_client_fallback_total",
            "limit" => limit.to_string(),
            "class" => c,
            "reason" => status
        )
        .increment(1);
    }
}

pub(crate) fn store_call(took: Duration, error: Option<&'static str>) {
    metrics::histogram!("ratelimit_client_store_seconds").record(took.as_secs_f64());
    if let Some(kind) = error {
        metrics::counter!("ratelimit_client_store_errors_total", "kind" => kind).increment(1);
    }
}
