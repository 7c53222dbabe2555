//! Response headers. The peer's three (`LIMIT_RESPONSE_HEADERS_ENABLED`, names from
//! `LIMIT_LIMIT_HEADER` …) describe the descriptor with the least remaining: its
//! requests_per_unit, its remaining and its seconds until reset. The IETF fields
//! (`RLS_IETF_HEADERS`) follow docs/http.md's `RL.ALL` recipe: one `RateLimit-Policy` item and
//! one `RateLimit` item per limited descriptor, in request order, and `Retry-After` on a denial.

use crate::settings::Settings;

/// One limited descriptor's part in the headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The policy name: the rule's `name`, else its stats key.
    pub name: String,
    pub requests_per_unit: u64,
    /// L, W (ms) and B (None when B = L) of the policy.
    pub limit: u64,
    pub window_ms: u64,
    pub burst: Option<u64>,
    /// This descriptor's own verdict (false: it would not admit the request) and charge.
    pub admitted: bool,
    pub hits: u64,
    pub remaining: u64,
    pub retry_after_ms: Option<u64>,
    pub reset_after_ms: u64,
}

fn secs_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// `(name, value)` pairs to add to the response.
pub fn response_headers(
    s: &Settings,
    parts: &[Part],
    over_limit: bool,
    combined_retry_ms: Option<u64>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if s.headers_enabled {
        if let Some(p) = parts.iter().min_by_key(|p| p.remaining) {
            out.push((s.header_limit.clone(), p.requests_per_unit.to_string()));
            out.push((s.header_remaining.clone(), p.remaining.to_string()));
            out.push((
                s.header_reset.clone(),
                secs_up(p.reset_after_ms).to_string(),
            ));
        }
    }
    if s.ietf_headers && !parts.is_empty() {
        let policies: Vec<String> = parts.iter().map(policy_item).collect();
        out.push(("RateLimit-Policy".into(), policies.join(", ")));
        let items: Vec<String> = parts.iter().map(|p| state_item(p, over_limit)).collect();
        if over_limit {
            let retry = combined_retry_ms
                .or_else(|| parts.iter().filter_map(|p| p.retry_after_ms).max())
                .unwrap_or(1000);
            out.push(("Retry-After".into(), secs_up(retry).to_string()));
        }
        out.push(("RateLimit".into(), items.join(", ")));
    }
    out
}

/// q and w with q/w = 1000·L/W and w whole seconds (docs/http.md).
pub fn quota(limit: u64, window_ms: u64) -> (u64, u64) {
    let g = gcd(window_ms.max(1), 1000);
    let q = limit.saturating_mul(1000 / g).min(999_999_999_999_999);
    (q, window_ms.max(1) / g)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn policy_item(p: &Part) -> String {
    let (q, w) = quota(p.limit, p.window_ms);
    let mut item = format!("{};q={q};w={w}", sf_string(&p.name));
    if let Some(b) = p.burst.filter(|b| *b != p.limit) {
        item += &format!(";rl-burst={b}");
    }
    item
}

fn state_item(p: &Part, over_limit: bool) -> String {
    let (q, _) = quota(p.limit, p.window_ms);
    let name = sf_string(&p.name);
    if over_limit && !p.admitted && p.hits > 0 {
        let t = secs_up(p.retry_after_ms.unwrap_or(p.reset_after_ms));
        format!("{name};r=0;t={t}")
    } else {
        format!(
            "{name};r={};t={}",
            p.remaining.min(q),
            secs_up(p.reset_after_ms)
        )
    }
}

/// A structured-field string: quoted, with `"` and `\` escaped and non-printable bytes dropped.
fn sf_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_matches_docs_http() {
        assert_eq!(quota(10, 100), (100, 1));
        assert_eq!(quota(30, 1500), (60, 3));
        assert_eq!(quota(100, 60_000), (100, 60));
        assert_eq!(sf_string("a\"b"), "\"a\\\"b\"");
    }
}
