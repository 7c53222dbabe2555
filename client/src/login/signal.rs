//! The global failure signal: failures (and refused attempts) of all accounts over a sliding
//! window, against an absolute threshold and a multiple of its own baseline. While it is tripped,
//! unknown devices are in the strict tier. The counts live in the store (two sliding counters, so
//! every gateway sees the fleet's); this holds what this gateway last read of them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::settings::LoginSettings;

/// The tier an unknown device is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    Normal,
    /// The global signal is tripped: a lower per-network limit, longer delays, a challenge.
    Strict,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Normal => "normal",
            Tier::Strict => "strict",
        }
    }
}

/// The two counts, each over its own window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reading {
    /// Over `signal_window`.
    pub(super) recent: u64,
    /// Over `baseline_window`, counted only while the signal was not tripped.
    pub(super) baseline: u64,
}

/// What the signal last saw: for logs, metrics and the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalState {
    pub tier: Tier,
    /// Failures and refused attempts in the last `signal_window`.
    pub recent: u64,
    /// The count at which it trips (the lower of the absolute and the relative threshold).
    pub threshold: u64,
    /// How many times this gateway saw it trip.
    pub trips: u64,
}

/// The count at which the signal trips: `absolute_threshold`, or `baseline_multiple` × the
/// baseline scaled to the signal's window (at least `baseline_floor`), whichever is lower.
pub(super) fn threshold(s: &LoginSettings, baseline: u64) -> u64 {
    let (recent_ms, baseline_ms) = (s.signal_window.as_millis(), s.baseline_window.as_millis());
    let scaled = u128::from(baseline) * recent_ms / baseline_ms.max(1);
    let base = u64::try_from(scaled)
        .unwrap_or(u64::MAX)
        .max(s.baseline_floor);
    base.saturating_mul(s.baseline_multiple)
        .min(s.absolute_threshold)
}

/// The tier after a reading: trips at the threshold, falls back below `release_percent` of it.
pub(super) fn next(s: &LoginSettings, now: Tier, r: Reading) -> Tier {
    let at = threshold(s, r.baseline);
    match now {
        Tier::Normal if r.recent >= at => Tier::Strict,
        Tier::Strict
            if u128::from(r.recent) * 100 < u128::from(at) * u128::from(s.release_percent) =>
        {
            Tier::Normal
        }
        tier => tier,
    }
}

/// This gateway's view of the signal.
#[derive(Default)]
pub(super) struct Signal {
    strict: AtomicBool,
    /// The client clock's ns at the last reading; 0: never read.
    read_at: AtomicU64,
    recent: AtomicU64,
    threshold: AtomicU64,
    trips: AtomicU64,
}

impl Signal {
    pub(super) fn tier(&self) -> Tier {
        if self.strict.load(Ordering::Relaxed) {
            Tier::Strict
        } else {
            Tier::Normal
        }
    }

    /// True when the last reading is older than `refresh_ns` (or there was none) and this caller
    /// is the one to read it: the first to see it stale marks it read now, so a burst of
    /// attempts reads the store once, not once each.
    pub(super) fn claim(&self, now_ns: u64, refresh_ns: u64) -> bool {
        let at = self.read_at.load(Ordering::Relaxed);
        let stale = at == 0 || now_ns.saturating_sub(at) >= refresh_ns;
        stale
            && self
                .read_at
                .compare_exchange(at, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes a reading of the store's counts; returns the tier after it.
    pub(super) fn observe(&self, s: &LoginSettings, r: Reading, now_ns: u64) -> Tier {
        self.read_at.store(now_ns.max(1), Ordering::Relaxed);
        self.recent.store(r.recent, Ordering::Relaxed);
        self.threshold
            .store(threshold(s, r.baseline), Ordering::Relaxed);
        let tier = next(s, self.tier(), r);
        let was = self.strict.swap(tier == Tier::Strict, Ordering::Relaxed);
        if tier == Tier::Strict && !was {
            self.trips.fetch_add(1, Ordering::Relaxed);
        }
        tier
    }

    pub(super) fn state(&self) -> SignalState {
        SignalState {
            tier: self.tier(),
            recent: self.recent.load(Ordering::Relaxed),
            threshold: self.threshold.load(Ordering::Relaxed),
            trips: self.trips.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::login::secret::Secret;

    fn settings() -> LoginSettings {
        LoginSettings::new(Secret::new(vec![3; 32]).unwrap())
    }

    #[test]
    fn the_threshold_is_the_lower_of_absolute_and_relative() {
        let s = settings(); // 1,000 absolute; 4 × baseline; floor 100; 60 s of 1 h
        assert_eq!(threshold(&s, 0), 400, "a quiet site: the floor");
        assert_eq!(threshold(&s, 60 * 150), 600, "150 a minute → 600");
        assert_eq!(threshold(&s, 60 * 1_000), 1_000, "the absolute caps it");
        assert_eq!(threshold(&s, u64::MAX), 1_000);
    }

    #[test]
    fn trips_at_the_threshold_and_falls_back_below_half() {
        let s = settings();
        let r = |recent| Reading {
            recent,
            baseline: 0,
        };
        assert_eq!(next(&s, Tier::Normal, r(399)), Tier::Normal);
        assert_eq!(next(&s, Tier::Normal, r(400)), Tier::Strict);
        assert_eq!(next(&s, Tier::Strict, r(200)), Tier::Strict);
        assert_eq!(next(&s, Tier::Strict, r(199)), Tier::Normal);
        let signal = Signal::default();
        assert!(signal.claim(5, 1), "never read");
        assert!(!signal.claim(5, 1), "claimed by the first");
        assert_eq!(signal.observe(&s, r(500), 10), Tier::Strict);
        assert_eq!(signal.observe(&s, r(300), 20), Tier::Strict);
        assert!(!signal.claim(24, 5));
        assert!(signal.claim(25, 5));
        assert_eq!(signal.observe(&s, r(10), 30), Tier::Normal);
        assert_eq!(signal.observe(&s, r(900), 40), Tier::Strict);
        let state = signal.state();
        assert_eq!((state.trips, state.recent, state.threshold), (2, 900, 400));
    }
}
