//! The peer's default metrics sink: statsd over UDP to STATSD_HOST:STATSD_PORT, every
//! STATS_FLUSH_INTERVAL, under the peer's names (`ratelimit.service.rate_limit.<key>.<stat>`,
//! `ratelimit_server.<method>.total_requests` and `.response_time` in ms). Counters are sent as
//! their increase since the last flush, as the peer's stats library sends them. EXTRA_TAGS
//! (`k1:v1,k2:v2`) are written into each name as `.__k=v` (sorted by key), as that library
//! writes tags for plain statsd, or as DogStatsD tags under USE_DOG_STATSD.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;

use cadence::prelude::*;
use cadence::{StatsdClient, UdpMetricSink};
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::settings::Settings;

pub struct Statsd {
    client: StatsdClient,
    /// Written into every name (plain statsd); empty under DogStatsD.
    suffix: String,
    dog_tags: Vec<(String, String)>,
    last: HashMap<String, u64>,
}

impl Statsd {
    pub fn new(settings: &Settings) -> Result<Statsd, String> {
        let tags = settings.extra_tags.clone();
        let addr = (settings.statsd_host.as_str(), settings.statsd_port);
        let socket = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("statsd: {e}"))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("statsd: {e}"))?;
        let sink = UdpMetricSink::from(addr, socket).map_err(|e| {
            format!(
                "STATSD_HOST/PORT {}:{}: {e}",
                settings.statsd_host, settings.statsd_port
            )
        })?;
        let (suffix, dog_tags) = if settings.use_dog_statsd {
            (String::new(), tags)
        } else {
            let suffix = tags.iter().map(|(k, v)| format!(".__{k}={v}")).collect();
            (suffix, Vec::new())
        };
        Ok(Statsd {
            client: StatsdClient::from_sink("", sink),
            suffix,
            dog_tags,
            last: HashMap::new(),
        })
    }

    /// Sends what changed since the last flush.
    pub fn flush(&mut self, metrics: &Metrics) {
        for (name, total) in metrics.peer_counters() {
            let before = self.last.insert(name.clone(), total).unwrap_or(0);
            let delta = total.saturating_sub(before);
            if delta == 0 {
                continue;
            }
            let full = format!("{name}{}", self.suffix);
            let mut m = self.client.count_with_tags(&full, delta);
            for (k, v) in &self.dog_tags {
                m = m.with_tag(k, v);
            }
            if let Err(e) = m.try_send() {
                log::debug!("statsd: {e}");
            }
        }
        for (method, times) in metrics.take_timings() {
            let full = format!("ratelimit_server.{method}.response_time{}", self.suffix);
            for ms in times {
                let mut m = self
                    .client
                    .time_with_tags(&full, std::time::Duration::from_secs_f64(ms / 1000.0));
                for (k, v) in &self.dog_tags {
                    m = m.with_tag(k, v);
                }
                if let Err(e) = m.try_send() {
                    log::debug!("statsd: {e}");
                }
            }
        }
    }
}

/// The flusher, when USE_STATSD is on and DISABLE_STATS off. A sink that cannot be set up (the
/// host does not resolve) is logged and the server runs without it, as a statsd daemon that is
/// not listening costs the peer nothing either.
pub fn spawn(settings: &Settings, metrics: Arc<Metrics>) -> Option<JoinHandle<()>> {
    if !settings.use_statsd || settings.disable_stats {
        return None;
    }
    let mut statsd = match Statsd::new(settings) {
        Ok(s) => s,
        Err(e) => {
            log::error!("no statsd: {e}");
            return None;
        }
    };
    let every = settings
        .stats_flush_interval
        .max(std::time::Duration::from_millis(1));
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            statsd.flush(&metrics);
        }
    }))
}
