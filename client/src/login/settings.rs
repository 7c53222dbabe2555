//! What a [`LoginGuard`](super::LoginGuard) enforces, with its defaults, and the check that every
//! setting is usable as written (a setting the store would refuse is refused here, by name).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client_ip::Prefixes;
use crate::clock::Clock;

use super::clock::UnixClock;
use super::secret::Secret;

/// The store's largest L, W or queue (docs/commands.md): every count and window fits it.
pub const MAX_STORE_VALUE: u64 = 1_000_000_000_000;

/// The largest `max_account_bytes` accepted: 64 KiB.
pub const MAX_ACCOUNT_BYTES: usize = 65_536;

/// The longest key prefix accepted.
pub const MAX_KEY_PREFIX_BYTES: usize = 64;

/// The guard's settings; `LoginSettings::new(secret)` has the defaults (docs/login.md lists them).
#[derive(Clone)]
pub struct LoginSettings {
    /// Signs device tokens and names accounts in keys (a keyed hash). Rotating it revokes every
    /// device token and starts every account's counts afresh.
    pub secret: Secret,
    /// Put before every key (`login:`); no `{` or `}`, at most [`MAX_KEY_PREFIX_BYTES`].
    pub key_prefix: String,
    /// Device-token expiry and how often the global signal is read; the Unix clock by default.
    pub clock: Arc<dyn Clock>,
    /// The longest account name looked at: a longer one is refused before any work (its hash
    /// would cost the gateway time in proportion). 1,024 bytes; at most [`MAX_ACCOUNT_BYTES`].
    pub max_account_bytes: usize,

    /// The hard cap: failures per account from unknown devices in `failure_window` (NIST SP
    /// 800-63B: at most 100 consecutive failures). A success resets it. 100.
    pub max_failures: u64,
    /// 1 h: the cap refills at `max_failures` per this window.
    pub failure_window: Duration,
    /// Failures in a row before any delay. 5.
    pub free_failures: u64,
    /// Each further failure adds this to the wait before the next attempt; one step drains per
    /// step of time. 1 s.
    pub delay_step: Duration,
    /// The longest delay; beyond it attempts are refused until a step drains. 60 s.
    pub max_delay: Duration,

    /// The network of a client address that counts as one: IPv4 /24, IPv6 /64.
    pub prefixes: Prefixes,
    /// Failures per network (all accounts) in `prefix_window`. 50.
    pub prefix_failures: u64,
    /// 15 min.
    pub prefix_window: Duration,
    /// Failures per (account, network) in `pair_window`. 10.
    pub pair_failures: u64,
    /// 1 h.
    pub pair_window: Duration,

    /// The strict tier, while the global signal is tripped, for unknown devices: failures per
    /// network in `prefix_window`. 5.
    pub strict_prefix_failures: u64,
    /// Free failures in a row per account in the strict tier. 2.
    pub strict_free_failures: u64,
    /// The delay step of the strict tier. 5 s.
    pub strict_delay_step: Duration,
    /// The longest delay of the strict tier. 300 s.
    pub strict_max_delay: Duration,
    /// Unknown devices get `Verdict::Challenge` in the strict tier until the application says
    /// they passed one (a CAPTCHA). true.
    pub challenge_unknown_devices: bool,

    /// The global signal: failures (and refused attempts) of all accounts over this sliding
    /// window. 60 s.
    pub signal_window: Duration,
    /// Its baseline: the same count over this longer window, scaled to `signal_window`, counted
    /// only while the signal is not tripped (an attack does not become the baseline). 1 h.
    pub baseline_window: Duration,
    /// Trips at this many in `signal_window`, whatever the baseline. 1,000.
    pub absolute_threshold: u64,
    /// Trips at this multiple of the baseline. 4.
    pub baseline_multiple: u64,
    /// The baseline is taken as at least this many per `signal_window` (a quiet site does not trip
    /// on a handful of typos). 100.
    pub baseline_floor: u64,
    /// Falls back once the count is below this percentage of the threshold. 50.
    pub release_percent: u64,
    /// A gateway that records nothing reads the signal at most this often. 1 s.
    pub signal_refresh: Duration,

    /// How long a device token is valid. 30 days.
    pub device_lifetime: Duration,
    /// Failures per account from its trusted devices in `trusted_window`, apart from every other
    /// count. 20.
    pub trusted_failures: u64,
    /// 1 h.
    pub trusted_window: Duration,

    /// While the store does not answer, each gateway's own limit per account (and per (account,
    /// network)): attempts, successful or not, in `fallback_window`. 10.
    pub fallback_account_attempts: u64,
    /// The same per network. 50.
    pub fallback_prefix_attempts: u64,
    /// 15 min.
    pub fallback_window: Duration,
}

impl LoginSettings {
    /// The defaults, signing with `secret`.
    pub fn new(secret: Secret) -> LoginSettings {
        let min = |m: u64| Duration::from_secs(60 * m);
        LoginSettings {
            secret,
            key_prefix: "login:".into(),
            clock: Arc::new(UnixClock),
            max_account_bytes: 1_024,
            max_failures: 100,
            failure_window: min(60),
            free_failures: 5,
            delay_step: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            prefixes: Prefixes { v4: 24, v6: 64 },
            prefix_failures: 50,
            prefix_window: min(15),
            pair_failures: 10,
            pair_window: min(60),
            strict_prefix_failures: 5,
            strict_free_failures: 2,
            strict_delay_step: Duration::from_secs(5),
            strict_max_delay: Duration::from_secs(300),
            challenge_unknown_devices: true,
            signal_window: Duration::from_secs(60),
            baseline_window: min(60),
            absolute_threshold: 1_000,
            baseline_multiple: 4,
            baseline_floor: 100,
            release_percent: 50,
            signal_refresh: Duration::from_secs(1),
            device_lifetime: Duration::from_secs(30 * 86_400),
            trusted_failures: 20,
            trusted_window: min(60),
            fallback_account_attempts: 10,
            fallback_prefix_attempts: 50,
            fallback_window: min(15),
        }
    }

    /// Every setting usable as written, or the first that is not, by name.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let p = &self.key_prefix;
        if p.len() > MAX_KEY_PREFIX_BYTES || p.contains(['{', '}']) {
            return Err(bad("key_prefix", "at most 64 bytes, without { or }"));
        }
        if !(1..=MAX_ACCOUNT_BYTES).contains(&self.max_account_bytes) {
            return Err(bad("max_account_bytes", "from 1 to 65536"));
        }
        let counts = [
            ("max_failures", self.max_failures),
            ("free_failures", self.free_failures),
            ("prefix_failures", self.prefix_failures),
            ("pair_failures", self.pair_failures),
            ("strict_prefix_failures", self.strict_prefix_failures),
            ("strict_free_failures", self.strict_free_failures),
            ("baseline_multiple", self.baseline_multiple),
            ("absolute_threshold", self.absolute_threshold),
            ("baseline_floor", self.baseline_floor),
            ("trusted_failures", self.trusted_failures),
            ("fallback_account_attempts", self.fallback_account_attempts),
            ("fallback_prefix_attempts", self.fallback_prefix_attempts),
        ];
        for (name, v) in counts {
            if !(1..=MAX_STORE_VALUE).contains(&v) {
                return Err(bad(name, "an integer from 1 to 10^12"));
            }
        }
        if !(1..=100).contains(&self.release_percent) {
            return Err(bad("release_percent", "from 1 to 100"));
        }
        let windows = [
            ("failure_window", self.failure_window),
            ("delay_step", self.delay_step),
            ("max_delay", self.max_delay),
            ("prefix_window", self.prefix_window),
            ("pair_window", self.pair_window),
            ("strict_delay_step", self.strict_delay_step),
            ("strict_max_delay", self.strict_max_delay),
            ("signal_window", self.signal_window),
            ("baseline_window", self.baseline_window),
            ("signal_refresh", self.signal_refresh),
            ("trusted_window", self.trusted_window),
            ("fallback_window", self.fallback_window),
            ("device_lifetime", self.device_lifetime),
        ];
        for (name, d) in windows {
            if !(1..=u128::from(MAX_STORE_VALUE)).contains(&d.as_millis()) {
                return Err(bad(name, "from 1 ms to 10^12 ms"));
            }
        }
        if self.baseline_window <= self.signal_window {
            return Err(bad("baseline_window", "longer than signal_window"));
        }
        for (name, free, step, max) in [
            (
                "max_delay",
                self.free_failures,
                self.delay_step,
                self.max_delay,
            ),
            (
                "strict_max_delay",
                self.strict_free_failures,
                self.strict_delay_step,
                self.strict_max_delay,
            ),
        ] {
            let queue = free.saturating_add(steps(max, step));
            if queue >= MAX_STORE_VALUE {
                return Err(bad(name, "at most 10^12 − 1 steps with its free failures"));
            }
        }
        Ok(())
    }
}

/// How many `step`s make `max`, rounded up.
pub(super) fn steps(max: Duration, step: Duration) -> u64 {
    let step = step.as_millis().max(1);
    u64::try_from(max.as_millis().div_ceil(step)).unwrap_or(u64::MAX)
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A setting that cannot be enforced as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSetting {
    pub name: &'static str,
    pub expected: &'static str,
}

fn bad(name: &'static str, expected: &'static str) -> InvalidSetting {
    InvalidSetting { name, expected }
}

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid login setting {}: expected {}",
            self.name, self.expected
        )
    }
}

impl std::error::Error for InvalidSetting {}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LoginSettings {
        LoginSettings::new(Secret::new(vec![3; 32]).unwrap())
    }

    #[test]
    fn the_defaults_are_valid_and_each_bad_setting_is_named() {
        assert_eq!(settings().validate(), Ok(()));
        type Break = fn(&mut LoginSettings);
        let cases: [(&str, Break); 9] = [
            ("key_prefix", |s| s.key_prefix = "{x}".into()),
            ("max_account_bytes", |s| s.max_account_bytes = 0),
            ("max_failures", |s| s.max_failures = 0),
            ("free_failures", |s| s.free_failures = 0),
            ("release_percent", |s| s.release_percent = 101),
            ("delay_step", |s| s.delay_step = Duration::ZERO),
            ("signal_window", |s| {
                s.signal_window = Duration::from_secs(u64::MAX)
            }),
            ("baseline_window", |s| s.baseline_window = s.signal_window),
            ("max_delay", |s| {
                s.delay_step = Duration::from_millis(1);
                s.max_delay = Duration::from_millis(MAX_STORE_VALUE);
            }),
        ];
        for (name, break_it) in cases {
            let mut s = settings();
            break_it(&mut s);
            assert_eq!(s.validate().map_err(|e| e.name), Err(name));
        }
        let e = bad("max_failures", "x").to_string();
        assert_eq!(e, "invalid login setting max_failures: expected x");
    }

    #[test]
    fn steps_round_up() {
        let s = Duration::from_secs;
        assert_eq!(steps(s(60), s(1)), 60);
        assert_eq!(steps(s(61), s(2)), 31);
        assert_eq!(steps(s(0), s(2)), 0);
    }
}
