//! The circuit in front of the store: after `failures` calls in a row that timed out or could not
//! reach it, the store is not called (the fallback decides at once) until a probe is due; one
//! request then probes it. A failed probe doubles the wait up to `max_backoff`; a success closes
//! the circuit. So a stalled store costs at most `failures` deadlines, then one per probe.

use std::sync::Mutex;
use std::time::Duration;

use crate::clock::ns;

#[derive(Clone, Copy, Debug)]
pub struct CircuitConfig {
    /// Failures in a row that open the circuit.
    pub failures: u32,
    /// The first wait before a probe.
    pub backoff: Duration,
    /// The longest wait between probes.
    pub max_backoff: Duration,
}

impl Default for CircuitConfig {
    fn default() -> CircuitConfig {
        CircuitConfig {
            failures: 3,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until_ns: u64,
        backoff_ns: u64,
    },
    /// A probe is out; another is allowed after `until_ns` (the first one's caller may have
    /// dropped it, and then nothing would ever report back).
    Probing {
        until_ns: u64,
        backoff_ns: u64,
    },
}

/// What the circuit lets a request do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    Call,
    Probe,
    Skip,
}

pub(crate) struct Circuit {
    config: CircuitConfig,
    state: Mutex<State>,
}

impl Circuit {
    pub(crate) fn new(config: CircuitConfig) -> Circuit {
        Circuit {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn permit(&self, now_ns: u64) -> Permit {
        let mut s = self.state();
        match *s {
            State::Closed { .. } => Permit::Call,
            State::Open {
                until_ns,
                backoff_ns,
            }
            | State::Probing {
                until_ns,
                backoff_ns,
            } if now_ns >= until_ns => {
                *s = State::Probing {
                    until_ns: now_ns.saturating_add(backoff_ns),
                    backoff_ns,
                };
                Permit::Probe
            }
            State::Open { .. } | State::Probing { .. } => Permit::Skip,
        }
    }

    /// Returns true when this success closed an open circuit (the store is back).
    pub(crate) fn success(&self) -> bool {
        let mut s = self.state();
        let was_open = !matches!(*s, State::Closed { .. });
        *s = State::Closed { failures: 0 };
        was_open
    }

    /// A call made with `permit` failed. Returns true when this failure opened the circuit.
    /// Only calls made under the current state count: a call let through while the circuit was
    /// closed and failing after it opened (one of many in flight when the store froze) does
    /// not push the next probe further away; a probe's failure doubles the wait.
    pub(crate) fn failure(&self, now_ns: u64, permit: Permit) -> bool {
        let mut s = self.state();
        let first = ns(self.config.backoff).max(1);
        let (next, opened) = match (*s, permit) {
            (State::Closed { failures }, _) if failures + 1 < self.config.failures.max(1) => (
                State::Closed {
                    failures: failures + 1,
                },
                false,
            ),
            (State::Closed { .. }, _) => (
                State::Open {
                    until_ns: now_ns.saturating_add(first),
                    backoff_ns: first,
                },
                true,
            ),
            (State::Probing { backoff_ns, .. } | State::Open { backoff_ns, .. }, Permit::Probe) => {
                let next = backoff_ns
                    .saturating_mul(2)
                    .min(ns(self.config.max_backoff).max(first));
                (
                    State::Open {
                        until_ns: now_ns.saturating_add(next),
                        backoff_ns: next,
                    },
                    false,
                )
            }
            (open, _) => (open, false),
        };
        *s = next;
        opened
    }

    pub(crate) fn is_open(&self) -> bool {
        !matches!(*self.state(), State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_failures_then_probes_with_doubling_backoff() {
        let c = Circuit::new(CircuitConfig {
            failures: 2,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(30),
        });
        let ms = 1_000_000;
        assert!(!c.failure(0, Permit::Call));
        assert_eq!(c.permit(0), Permit::Call);
        assert!(c.failure(0, Permit::Call), "opened");
        // Calls let through before it opened and failing after do not move the probe.
        assert!(!c.failure(5 * ms, Permit::Call));
        assert_eq!(c.permit(9 * ms), Permit::Skip);
        assert_eq!(c.permit(10 * ms), Permit::Probe);
        assert_eq!(c.permit(10 * ms), Permit::Skip, "one probe at a time");
        c.failure(10 * ms, Permit::Probe);
        assert_eq!(c.permit(29 * ms), Permit::Skip);
        assert_eq!(c.permit(30 * ms), Permit::Probe);
        c.failure(30 * ms, Permit::Probe);
        assert_eq!(c.permit(59 * ms), Permit::Skip, "capped at 30 ms");
        assert_eq!(c.permit(60 * ms), Permit::Probe);
        // A probe whose caller went away: another one after the backoff.
        assert_eq!(c.permit(89 * ms), Permit::Skip);
        assert_eq!(c.permit(90 * ms), Permit::Probe);
        assert!(c.success());
        assert_eq!(c.permit(60 * ms), Permit::Call);
        assert!(!c.success());
    }
}
