//! From a decision to the HTTP response a gateway sends: `429` with `Retry-After` (RFC 9110) and
//! the `RateLimit-Policy` / `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers (draft
//! 11), the recipe of docs/http.md, for one limiter or several (`RL.ALL`).

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::command::{AllDecision, Decision, Policy};

/// The largest Integer a structured field can carry (15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// How the headers are written.
#[derive(Clone, Debug)]
pub struct Headers {
    /// The draft has no burst parameter: B goes in an implementation-specific one, prefixed
    /// with a vendor name (the draft's own example is `acme-burst`). Use yours.
    pub burst_parameter: String,
    /// Add a random whole second (0 or 1) to `Retry-After` on a denial, so that clients denied
    /// in the same second do not all come back together (docs/http.md, "Jitter").
    pub jitter: bool,
}

impl Default for Headers {
    fn default() -> Headers {
        Headers {
            burst_parameter: "acme-burst".into(),
            jitter: false,
        }
    }
}

/// The status and the rate-limit headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The quota as the draft states it, q units per w whole seconds, with q/w = 1000·L/W: L and W
/// scaled by the smallest k = 1000/gcd(W, 1000) that makes w whole.
pub fn quota(policy: &Policy) -> (u64, u64) {
    let g = gcd(policy.window_ms, 1000).max(1);
    let q = policy.limit.saturating_mul(1000 / g).min(SF_INTEGER_MAX);
    (q, policy.window_ms / g)
}

/// `ceil(ms / 1000)`.
pub fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Full jitter for an SDK's retry: `Retry-After` plus a uniform random share of it again
/// (`random` is any random u64). Never earlier than the server said.
pub fn retry_delay(decision: &Decision, random: u64) -> Duration {
    let base = decision.retry_after_ms.unwrap_or(0);
    let extra = if base == 0 { 0 } else { random % (base + 1) };
    Duration::from_millis(base.saturating_add(extra))
}

fn random_bit() -> u64 {
    // The clock's nanoseconds: good enough to spread whole seconds.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos() >> 10) & 1)
}

fn value(s: String) -> HeaderValue {
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

impl Headers {
    /// `"name";q=<q>;w=<w>` (plus the burst parameter when B != L).
    pub fn policy_item(&self, name: &str, policy: &Policy) -> String {
        let (q, w) = quota(policy);
        let mut item = format!("\"{name}\";q={q};w={w}");
        if policy.capacity() != policy.limit {
            item += &format!(";{}={}", self.burst_parameter, policy.capacity());
        }
        item
    }

    /// `RateLimit` for one limiter: r capped at q; on a denial r=0 and t = `Retry-After`.
    fn state_item(&self, name: &str, policy: &Policy, d: &Decision, denied_s: u64) -> String {
        if d.allowed {
            let r = d.remaining.min(quota(policy).0);
            format!("\"{name}\";r={r};t={}", seconds_up(d.reset_after_ms))
        } else {
            format!("\"{name}\";r=0;t={denied_s}")
        }
    }

    fn jitter_s(&self) -> u64 {
        if self.jitter {
            random_bit()
        } else {
            0
        }
    }

    /// The response for one limiter's decision.
    pub fn response(&self, name: &str, policy: &Policy, d: &Decision) -> Response {
        let s = seconds_up(d.retry_after_ms.unwrap_or(0)) + self.jitter_s();
        let mut headers = HeaderMap::new();
        headers.insert(RATELIMIT_POLICY, value(self.policy_item(name, policy)));
        let status = if d.allowed {
            StatusCode::OK
        } else {
            headers.insert(http::header::RETRY_AFTER, value(s.to_string()));
            StatusCode::TOO_MANY_REQUESTS
        };
        headers.insert(RATELIMIT, value(self.state_item(name, policy, d, s)));
        Response { status, headers }
    }

    /// The response for an `RL.ALL` decision: one policy item and one state item per limiter
    /// (the draft's fields are lists), so the client sees which limit it hit. `Retry-After` is
    /// when every limiter would admit.
    pub fn response_all(&self, limiters: &[(&str, &Policy)], all: &AllDecision) -> Response {
        let s = seconds_up(all.combined.retry_after_ms.unwrap_or(0)) + self.jitter_s();
        let policies: Vec<String> = limiters
            .iter()
            .map(|(name, p)| self.policy_item(name, p))
            .collect();
        let states: Vec<String> = limiters
            .iter()
            .zip(&all.limiters)
            .map(|((name, p), d)| {
                let own = seconds_up(d.retry_after_ms.unwrap_or(0)) + self.jitter_s();
                self.state_item(name, p, d, own)
            })
            .collect();
        let mut headers = HeaderMap::new();
        headers.insert(RATELIMIT_POLICY, value(policies.join(", ")));
        let status = if all.combined.allowed {
            StatusCode::OK
        } else {
            headers.insert(http::header::RETRY_AFTER, value(s.to_string()));
            StatusCode::TOO_MANY_REQUESTS
        };
        headers.insert(RATELIMIT, value(states.join(", ")));
        Response { status, headers }
    }
}
