//! The gradient limit: the concurrency limit follows the ratio of the service's no-load latency
//! to its latency now, measured per window of samples (docs/shedding.md says why this one).
//!
//! Per window: `gradient = min_rtt · (1 + tolerance) / mean_rtt`, clamped to 0.5 ..= 2, and
//! `limit ← limit · gradient + ½ √limit`, half-smoothed. With a service of W workers the limit
//! settles a little above W, where the queue in front of the workers adds about `tolerance` plus
//! the headroom to the latency. The no-load latency (`min_rtt`) is the smallest window
//! mean seen since it was last measured; it is measured again (a *probe*: one window with no
//! more in flight than the service was seen to serve at once, ¾ of it, at least `min_limit`)
//! every `probe_interval`, and at once when windows keep showing even
//! their fastest request far above it, which is what a service that slowed down looks like.

use std::time::Duration;

use crate::limit::{Bounds, LimitAlgorithm, Observed, Sample};

/// The gradient never cuts the limit by more than half in one window, nor more than doubles it.
const MIN_GRADIENT: f64 = 0.5;
const MAX_GRADIENT: f64 = 2.0;
/// The headroom added per window, in square roots of the limit: the limit's line in front of
/// the workers. Measured with `make bench-shed` (8 workers × 10 ms): at 1 √limit the limit
/// settled at 12.3 and critical p99 at 5 × C was 30.2 ms against an unloaded 13.3 (2.3 ×), and
/// p99 stayed at twice the slow service's unloaded one after a 2 × slowdown; at ½ √limit it
/// settled at 10.4, critical p99 29.0 against 15.0 (1.9 ×), goodput 0.98 C either way, and p99
/// was within 2 × at once after the slowdown and after the speed-up. At ¼ the simulated flood's
/// well-behaved tenants fell to 98.5 % (the kept places are fewer on a lower limit).
const HEADROOM: f64 = 0.5;
/// The share of a window's new limit taken at once; the rest stays (damps oscillation).
const SMOOTHING: f64 = 0.5;
/// The places above the limit a critical request may take (`critical_overdraft`), in square
/// roots of the limit: about the limit's own headroom.
const CRITICAL_OVERDRAFT: f64 = 0.5;
/// A window with an overloaded answer (503, 504, timeout) multiplies the limit by this.
const DROP_BACKOFF: f64 = 0.9;
/// A probe runs at this fraction of the concurrency the service was last seen to sustain at its
/// no-load latency (see `Gradient::sustained`), or at `min_limit` if that is more. Below 1 so
/// that a no-load latency measured too high (the service sped up since) cannot confirm itself:
/// a probe above the workers measures their queue, which then reads `PROBE_FRACTION` × the old
/// latency, lower, and the next probe is lower still until it runs below the workers.
const PROBE_FRACTION: f64 = 0.75;
/// A probe that cannot get `window_samples` answers at its level in this many windows gives
/// up (the in-flight requests are too long to drain) and keeps the old no-load latency.
const PROBE_GIVE_UP_WINDOWS: u32 = 20;

/// The algorithm's settings; the defaults need no tuning for services from ~1 ms to seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientSettings {
    /// A window lasts at least this long (default 100 ms) …
    pub window: Duration,
    /// … and holds at least this many samples (default 10).
    pub window_samples: u32,
    /// The latency above the no-load one the service may show before the limit shrinks, as a
    /// fraction (default 0.1).
    pub tolerance: f64,
    /// How often the no-load latency is measured again at reduced concurrency (default 10 s).
    pub probe_interval: Duration,
    /// Measure at once when this many windows in a row (default 10) had even their fastest
    /// request above `stale_ratio` × the no-load latency (default 1.8).
    pub stale_windows: u32,
    pub stale_ratio: f64,
}

impl Default for GradientSettings {
    fn default() -> GradientSettings {
        GradientSettings {
            window: Duration::from_millis(100),
            window_samples: 10,
            tolerance: 0.1,
            probe_interval: Duration::from_secs(10),
            stale_windows: 10,
            stale_ratio: 1.8,
        }
    }
}

/// The samples of the window being filled.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start: Option<Duration>,
    count: u32,
    sum_nanos: u128,
    min: Option<Duration>,
    max_in_flight: usize,
    dropped: u32,
}

impl Window {
    fn add(&mut self, s: &Sample) {
        self.start.get_or_insert(s.at);
        self.count += 1;
        self.sum_nanos += s.rtt.as_nanos();
        self.min = Some(self.min.map_or(s.rtt, |m| m.min(s.rtt)));
        self.max_in_flight = self.max_in_flight.max(s.in_flight);
        self.dropped += u32::from(s.dropped);
    }

    fn mean(&self) -> Duration {
        let nanos = self.sum_nanos / u128::from(self.count.max(1));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// A measurement of the no-load latency in progress.
#[derive(Clone, Copy, Debug)]
struct Probe {
    saved_limit: f64,
    /// The requests allowed in flight while probing.
    level: usize,
    /// The first sample's time (unknown when the algorithm starts with a probe).
    started: Option<Duration>,
    samples: Window,
}

/// The gradient limit algorithm (pure: its clock is the samples' `at`).
#[derive(Clone, Debug)]
pub struct Gradient {
    bounds: Bounds,
    settings: GradientSettings,
    limit: f64,
    min_rtt: Option<Duration>,
    window: Window,
    gradient: f64,
    probe: Option<Probe>,
    last_probe: Option<Duration>,
    stale: u32,
    /// The last window's completions per second × the no-load latency: how many requests the
    /// service completes at once, counted in no-load latencies (Little's law). A service that
    /// serves W at a time, saturated, shows W; one with spare workers or one that slowed down
    /// since the no-load latency was measured shows less. So a probe at or below it runs with
    /// no request waiting for a worker, which is what measuring the no-load latency needs.
    sustained: f64,
}

impl Gradient {
    /// Refuses bounds or settings that cannot hold (by name).
    pub fn new(bounds: Bounds, settings: GradientSettings) -> Result<Gradient, String> {
        bounds.validate()?;
        if settings.window_samples == 0 {
            return Err("window_samples must be at least 1".into());
        }
        if !(settings.tolerance >= 0.0 && settings.tolerance.is_finite()) {
            return Err("tolerance must be a finite fraction ≥ 0".into());
        }
        if !(settings.stale_ratio > 1.0 && settings.stale_ratio.is_finite()) {
            return Err("stale_ratio must be a finite ratio above 1".into());
        }
        if settings.probe_interval.is_zero() {
            return Err("probe_interval must be above zero".into());
        }
        // Start safe: measure the no-load latency at `min_limit` before trusting any other.
        let mut gradient = Gradient {
            bounds,
            settings,
            limit: bounds.initial_limit as f64,
            min_rtt: None,
            window: Window::default(),
            gradient: 1.0,
            probe: None,
            last_probe: None,
            stale: 0,
            sustained: 0.0,
        };
        gradient.start_probe(None);
        Ok(gradient)
    }

    fn clamp(&self, limit: f64) -> f64 {
        limit.clamp(self.bounds.min_limit as f64, self.bounds.max_limit as f64)
    }

    /// Starts measuring the no-load latency at a fraction of the concurrency the service was
    /// seen to sustain rather than at `min_limit`: the probe's limit is what every tenant gets
    /// while it runs, and at `min_limit` (3 on a service of 8 workers) it shed even
    /// well-behaved tenants' requests for its few tens of milliseconds.
    fn start_probe(&mut self, now: Option<Duration>) {
        let min = self.bounds.min_limit;
        let level = ((self.sustained * PROBE_FRACTION).floor() as usize)
            .min(self.clamp(self.limit).round() as usize)
            .max(min);
        self.probe = Some(Probe {
            saved_limit: self.limit,
            level,
            started: now,
            samples: Window::default(),
        });
        self.stale = 0;
    }

    /// A sample while probing: only requests admitted at the probe's level or below count.
    fn probe_sample(&mut self, mut probe: Probe, s: &Sample) {
        let give_up = self.settings.window * PROBE_GIVE_UP_WINDOWS;
        let started = *probe.started.get_or_insert(s.at);
        if s.in_flight <= probe.level {
            probe.samples.add(s);
        }
        if probe.samples.count >= self.settings.window_samples {
            self.min_rtt = Some(probe.samples.mean());
        } else if s.at.saturating_sub(started) < give_up {
            self.probe = Some(probe);
            return;
        }
        self.probe = None;
        self.limit = probe.saved_limit;
        self.last_probe = Some(s.at);
        self.window = Window::default();
    }

    fn close_window(&mut self, now: Duration) {
        let w = std::mem::take(&mut self.window);
        let mean = w.mean();
        let min_rtt = match self.min_rtt {
            // At `min_limit` or below nothing queues: the window's mean is the no-load latency,
            // higher or lower than the last one (this tracks a slowdown at light load for free).
            Some(m) if w.max_in_flight > self.bounds.min_limit => m.min(mean),
            _ => mean,
        };
        self.min_rtt = Some(min_rtt);
        let span = now.saturating_sub(w.start.unwrap_or(now)).as_secs_f64();
        if span > 0.0 {
            // `count` samples span `count − 1` intervals between completions.
            self.sustained = f64::from(w.count.saturating_sub(1)) / span * min_rtt.as_secs_f64();
        }
        let last_probe = *self.last_probe.get_or_insert(now);

        let fastest = w.min.unwrap_or(mean).as_secs_f64();
        if fastest > self.settings.stale_ratio * min_rtt.as_secs_f64() {
            self.stale += 1;
        } else {
            self.stale = 0;
        }

        let mean_s = mean.as_secs_f64().max(1e-9);
        let mut gradient = (min_rtt.as_secs_f64() * (1.0 + self.settings.tolerance) / mean_s)
            .clamp(MIN_GRADIENT, MAX_GRADIENT);
        if let Some(target) = self.bounds.latency_target {
            if mean > target {
                gradient = gradient.min((target.as_secs_f64() / mean_s).max(MIN_GRADIENT));
            }
        }
        self.gradient = gradient;
        // A service that was never asked for the whole limit says nothing about a larger one.
        let app_limited = (w.max_in_flight as f64) * 2.0 < self.limit;
        if w.dropped > 0 {
            self.limit = self.clamp(self.limit * DROP_BACKOFF);
        } else if !(gradient >= 1.0 && app_limited) {
            let proposed = self.limit * gradient + HEADROOM * self.limit.sqrt();
            self.limit = self.clamp(self.limit * (1.0 - SMOOTHING) + proposed * SMOOTHING);
        }

        let due = now.saturating_sub(last_probe) >= self.settings.probe_interval;
        if due || self.stale >= self.settings.stale_windows {
            self.start_probe(Some(now));
        }
    }
}

impl LimitAlgorithm for Gradient {
    fn on_sample(&mut self, s: Sample) {
        if let Some(probe) = self.probe.take() {
            self.probe_sample(probe, &s);
            return;
        }
        self.window.add(&s);
        let elapsed = self
            .window
            .start
            .map_or(Duration::ZERO, |start| s.at.saturating_sub(start));
        if self.window.count >= self.settings.window_samples && elapsed >= self.settings.window {
            self.close_window(s.at);
        }
    }

    fn limit(&self) -> usize {
        if let Some(probe) = &self.probe {
            return probe.level;
        }
        // `limit` is kept within the bounds, so the conversion cannot overflow.
        self.clamp(self.limit).round() as usize
    }

    /// At the limit a request finding the service full waits in the shedder's queue for a
    /// completion, a critical one up to two no-load latencies: that wait, on top of the line in
    /// front of the workers and the service itself, put critical p99 at 2.4–2.6 × the no-load
    /// latency at 5 × C (`tests/simulated.rs`, eight seeds). A critical request let past the
    /// limit instead waits only in the workers' line, which the overdraft lengthens by about
    /// the limit's own headroom: 1.9–2.2 ×, critical success 100 %. The places it borrows are
    /// given back by holding the next completions for the queue, so on average the service
    /// takes no more; if critical traffic keeps borrowing, the latency shows it and the
    /// gradient trims the limit. Also while probing: the probe runs below the workers, so the
    /// overdraft adds no line, and its samples count only requests admitted at its level
    /// (without it, critical p99 at 5 × C was 21.8–24.5 ms against 19.2–21.2). Never past
    /// `max_limit`, an operator's hard bound.
    fn critical_overdraft(&self) -> usize {
        let limit = self.limit();
        let overdraft = ((CRITICAL_OVERDRAFT * (limit as f64).sqrt()).ceil() as usize).max(1);
        overdraft.min(self.bounds.max_limit.saturating_sub(limit))
    }

    fn steady_limit(&self) -> usize {
        let limit = self.probe.as_ref().map_or(self.limit, |p| p.saved_limit);
        self.clamp(limit).round() as usize
    }

    fn observed(&self) -> Observed {
        Observed {
            min_rtt: self.min_rtt,
            gradient: self.gradient,
            probing: self.probe.is_some(),
        }
    }
}

#[cfg(test)]
mod tests;
