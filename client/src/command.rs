//! The commands as types: a [`Policy`] (algorithm, L, W, B), the [`Decision`] of the five-integer
//! reply, and how each command is spelled for a [`Backend`] (the module's `RL.*` commands or the
//! Functions library's `FCALL rl_*`).

use redis::Value;

use crate::error::Error;

/// The algorithms a policy can name; each has its own command (`RL.GCRA` …) and its own name
/// inside `RL.ALL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Gcra,
    TokenBucket,
    SlidingLog,
    SlidingCounter,
    FixedWindow,
}

impl Algorithm {
    /// The name inside `RL.ALL` and after `RL.` (`GCRA`, `TOKENBUCKET` …).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "GCRA",
            Algorithm::TokenBucket => "TOKENBUCKET",
            Algorithm::SlidingLog => "SLIDINGLOG",
            Algorithm::SlidingCounter => "SLIDINGCOUNTER",
            Algorithm::FixedWindow => "FIXEDWINDOW",
        }
    }

    /// Whether the algorithm takes `BURST B` (GCRA and the token bucket).
    pub fn has_burst(self) -> bool {
        matches!(self, Algorithm::Gcra | Algorithm::TokenBucket)
    }

    /// The algorithm a name (`GCRA`, any case) names.
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// Every algorithm, in declaration order (the registry's order: `tests/registry.rs` holds
    /// them to it).
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
    ];
}

/// The promise "no more than L requests in any window of W ms, plus a burst of B", as every
/// command takes it. `burst` is sent only when set (the server defaults it to L) and only for
/// the algorithms that have one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    pub algorithm: Algorithm,
    pub limit: u64,
    pub window_ms: u64,
    pub burst: Option<u64>,
}

impl Policy {
    pub fn new(algorithm: Algorithm, limit: u64, window_ms: u64) -> Policy {
        Policy {
            algorithm,
            limit,
            window_ms,
            burst: None,
        }
    }
    pub fn gcra(limit: u64, window_ms: u64) -> Policy {
        Policy::new(Algorithm::Gcra, limit, window_ms)
    }
    pub fn token_bucket(limit: u64, window_ms: u64) -> Policy {
        Policy::new(Algorithm::TokenBucket, limit, window_ms)
    }
    pub fn sliding_log(limit: u64, window_ms: u64) -> Policy {
        Policy::new(Algorithm::SlidingLog, limit, window_ms)
    }
    pub fn sliding_counter(limit: u64, window_ms: u64) -> Policy {
        Policy::new(Algorithm::SlidingCounter, limit, window_ms)
    }
    pub fn fixed_window(limit: u64, window_ms: u64) -> Policy {
        Policy::new(Algorithm::FixedWindow, limit, window_ms)
    }

    /// `BURST B` (GCRA and token bucket; the window algorithms reject it).
    pub fn burst(mut self, burst: u64) -> Policy {
        self.burst = Some(burst);
        self
    }

    /// The capacity the reply's `limit` field reports: B for GCRA and the token bucket (L when
    /// unset), L for the window algorithms.
    pub fn capacity(&self) -> u64 {
        match self.burst {
            Some(b) if self.algorithm.has_burst() => b,
            _ => self.limit,
        }
    }

    /// `L W [BURST B]`, the words after the key.
    pub(crate) fn args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.limit).arg(self.window_ms);
        if let Some(b) = self.burst {
            cmd.arg("BURST").arg(b);
        }
    }
}

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The store decided (one call, or the call that took a lease).
    Store,
    /// Spent from tokens this process already leased: no store call.
    Lease,
    /// The store did not answer: the class's fallback decided.
    Fallback(Class),
}

/// The class of a limit decides what happens when the store does not answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Login, one-time codes: a strict local limit, or fail closed when there is none.
    Security,
    /// Per-key API limits: a local bucket at L/N (or L when brief overshoot is fine).
    Contract,
    /// Quotas: fail open, count locally, charge the store when it answers again.
    Billing,
    /// What the service can take: never sent to the store; admitted here, and the load shedder
    /// in front of the service (the `redis-ratelimit-shed` layer or sidecar) decides.
    Capacity,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Security => "security",
            Class::Contract => "contract",
            Class::Billing => "billing",
            Class::Capacity => "capacity",
        }
    }
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::Lease => "lease",
            Source::Fallback(_) => "fallback",
        }
    }
}

/// The five-integer reply as a type. `granted` is field 1 as the server sent it (1 or 0 for a
/// decision, the tokens granted for `RL.LEASE`, the tokens given back for `RL.REFUND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub granted: u64,
    /// The capacity: B for GCRA and token bucket, L for the window algorithms.
    pub limit: u64,
    /// How many more cost-1 requests would be admitted now.
    pub remaining: u64,
    /// `None` when admitted; else ms until this request would be admitted (rounded up).
    pub retry_after_ms: Option<u64>,
    /// ms until the limiter is full again (0 when full).
    pub reset_after_ms: u64,
    pub source: Source,
}

impl Decision {
    /// A capacity-class limit's decision: admitted without the store, for the shedder to decide.
    pub fn to_shedder(policy: &Policy, cost: u64) -> Decision {
        Decision {
            allowed: true,
            granted: cost,
            limit: policy.capacity(),
            remaining: policy.capacity(),
            retry_after_ms: None,
            reset_after_ms: 0,
            source: Source::Fallback(Class::Capacity),
        }
    }

    /// The five integers exactly as the server replies them.
    pub fn reply(&self) -> [i64; 5] {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            i(self.granted),
            i(self.limit),
            i(self.remaining),
            self.retry_after_ms.map_or(-1, i),
            i(self.reset_after_ms),
        ]
    }

    pub(crate) fn from_reply(reply: [i64; 5]) -> Result<Decision, Error> {
        let [granted, limit, remaining, retry, reset] = reply;
        let u = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| Error::Reply(format!("negative {what}: {v}")))
        };
        Ok(Decision {
            allowed: granted > 0,
            granted: u(granted, "allowed")?,
            limit: u(limit, "limit")?,
            remaining: u(remaining, "remaining")?,
            retry_after_ms: if retry < 0 {
                None
            } else {
                Some(u(retry, "retry_after_ms")?)
            },
            reset_after_ms: u(reset, "reset_after_ms")?,
            source: Source::Store,
        })
    }

    pub(crate) fn from_value(v: &Value) -> Result<Decision, Error> {
        Decision::from_reply(ints::<5>(v)?)
    }
}

/// `RL.SHAPE`'s reply: the five fields and `delay_ms`, the time to wait before proceeding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shaped {
    pub decision: Decision,
    pub delay_ms: u64,
}

impl Shaped {
    pub fn reply(&self) -> [i64; 6] {
        let [a, b, c, d, e] = self.decision.reply();
        [
            a,
            b,
            c,
            d,
            e,
            i64::try_from(self.delay_ms).unwrap_or(i64::MAX),
        ]
    }
}

/// `RL.SHAPE key L W [QUEUE q] [DELAY d | NODELAY]`: the leaky bucket as a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub limit: u64,
    pub window_ms: u64,
    pub queue: Option<u64>,
    pub delay: ShapeDelay,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeDelay {
    /// Every queued request is delayed (the server's default).
    Default,
    /// `DELAY d`: the first d go at once.
    Delay(u64),
    /// `NODELAY`: none is delayed.
    NoDelay,
}

/// `RL.ALL`'s reply: the combined decision, then one per limiter in argument order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllDecision {
    pub combined: Decision,
    pub limiters: Vec<Decision>,
}

/// How the limiter commands are reached on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The module: `RL.GCRA key …`.
    Module,
    /// The Redis Functions library `ratelimit`: `FCALL rl_gcra 1 key …`, the same arguments
    /// after the key and the same replies.
    Functions,
    /// The same library where `FUNCTION` is refused: `EVALSHA <sha of rl_gcra's script> 1 key …`
    /// (crate::scripts), the same arguments and replies.
    Scripts,
}

impl Backend {
    /// The name the startup log and /metrics show: `module`, `functions` or `scripts`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Module => "module",
            Backend::Functions => "functions",
            Backend::Scripts => "scripts",
        }
    }

    /// The command `name` (`GCRA`, `LEASE`, `ALL`, `DEMAND` …) on `keys`; the caller appends the
    /// rest (the library takes its keys first: `RL.SHARE`'s keys go here, their shares after).
    pub fn command(self, name: &str, keys: &[&str]) -> redis::Cmd {
        let mut cmd;
        match self {
            Backend::Module => {
                cmd = redis::cmd(&format!("RL.{name}"));
                if name == "ALL" || name == "SETTLE" {
                    cmd.arg(keys.len());
                }
            }
            Backend::Functions => {
                cmd = redis::cmd("FCALL");
                cmd.arg(format!("rl_{}", name.to_ascii_lowercase()))
                    .arg(keys.len());
            }
            Backend::Scripts => {
                let entry = format!("rl_{}", name.to_ascii_lowercase());
                cmd = redis::cmd("EVALSHA");
                // An entry without a script (none: every name called here is one) reaches the
                // server as an unknown SHA, answered NOSCRIPT, and never runs.
                cmd.arg(crate::scripts::script(&entry).map_or("0", |s| s.sha.as_str()))
                    .arg(keys.len());
            }
        }
        for k in keys {
            cmd.arg(*k);
        }
        cmd
    }
}

/// A reply of exactly N integers.
pub(crate) fn ints<const N: usize>(v: &Value) -> Result<[i64; N], Error> {
    let items = match v {
        Value::Array(items) => items,
        other => {
            return Err(Error::Reply(format!(
                "expected {N} integers, got {other:?}"
            )))
        }
    };
    let mut out = [0i64; N];
    if items.len() != N {
        return Err(Error::Reply(format!("expected {N} integers, got {v:?}")));
    }
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = match item {
            Value::Int(i) => *i,
            other => return Err(Error::Reply(format!("expected an integer, got {other:?}"))),
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Arg::Cursor => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn each_backend_spells_the_commands() {
        let p = Policy::gcra(10, 1000).burst(20);
        let mut m = Backend::Module.command("GCRA", &["k"]);
        let mut f = Backend::Functions.command("GCRA", &["k"]);
        p.args(&mut m);
        p.args(&mut f);
        assert_eq!(words(&m), ["RL.GCRA", "k", "10", "1000", "BURST", "20"]);
        assert_eq!(
            words(&f),
            ["FCALL", "rl_gcra", "1", "k", "10", "1000", "BURST", "20"]
        );
        let all = Backend::Module.command("ALL", &["a", "b"]);
        assert_eq!(words(&all), ["RL.ALL", "2", "a", "b"]);
        let all = Backend::Functions.command("ALL", &["a", "b"]);
        assert_eq!(words(&all), ["FCALL", "rl_all", "2", "a", "b"]);
        let peek = Backend::Functions.command("PEEK", &["k"]);
        assert_eq!(words(&peek), ["FCALL", "rl_peek", "1", "k"]);
        let lease = Backend::Functions.command("TOKENBUCKET", &["k"]);
        assert_eq!(words(&lease), ["FCALL", "rl_tokenbucket", "1", "k"]);
    }

    #[test]
    fn replies_that_are_not_five_integers_are_errors() {
        assert!(Decision::from_value(&Value::Nil).is_err());
        assert!(Decision::from_value(&Value::Array(vec![Value::Int(1); 4])).is_err());
        let negative = Value::Array(vec![
            Value::Int(1),
            Value::Int(-2),
            Value::Int(0),
            Value::Int(-1),
            Value::Int(0),
        ]);
        assert!(Decision::from_value(&negative).is_err());
        let ok = Value::Array(vec![
            Value::Int(0),
            Value::Int(2),
            Value::Int(0),
            Value::Int(7),
            Value::Int(9),
        ]);
        let d = Decision::from_value(&ok).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, Some(7));
        assert_eq!(d.reply(), [0, 2, 0, 7, 9]);
    }
}
