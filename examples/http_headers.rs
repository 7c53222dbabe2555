//! From a limiter's reply to the HTTP response a gateway sends: status, `Retry-After` (RFC 9110)
//! and the `RateLimit-Policy` / `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers (draft
//! 11). The README's "From the reply to HTTP" gives the mapping and docs/http.md explains it;
//! `tests/http_headers.rs` includes this file and checks the worked table of docs/http.md against it.
//!
//! `cargo run --example http_headers -- KEY L W [B] [HOST PORT]` calls `RL.GCRA KEY L W BURST B`
//! once and prints the response head a gateway would send. The server: HOST PORT when given,
//! else 127.0.0.1 on `$PORT` (the variable `PORT=… make run` takes), else 6379.

/// `RateLimit-Policy` has no burst parameter: B goes in an implementation-specific one, which the
/// draft asks to prefix with a vendor name (its own example is `acme-burst`). Use yours.
pub const BURST_PARAMETER: &str = "acme-burst";

/// The largest Integer a structured field can carry (15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// A limiter's policy as the command takes it: L requests per W ms, a burst of B.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub limit: u64,
    pub window_ms: u64,
    pub burst: u64,
}

/// What a gateway sends: the status and the rate-limit headers, in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The quota as the draft states it, q units per w whole seconds, with q/w = 1000·L/W: the real
/// rate per second. L and W are scaled by the smallest k that makes w = W·k/1000 whole, that is
/// k = 1000/gcd(W, 1000); then q = L·k. As w covers k whole windows, "q per w" also holds for the
/// window algorithms (k windows of L). A rate whose q would not fit a structured-field Integer
/// (L near 10^12 with an awkward W) is cut to the largest one.
pub fn quota(policy: Policy) -> (u64, u64) {
    let g = gcd(policy.window_ms, 1000).max(1);
    let k = 1000 / g;
    let q = policy.limit.saturating_mul(k).min(SF_INTEGER_MAX);
    (q, policy.window_ms / g)
}

/// `ceil(ms / 1000)`, for a duration the reply gives in ms (never negative when used).
fn seconds_up(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).div_ceil(1000)
}

/// The response for the five-integer reply of a decision (`RL.GCRA`, `RL.TOKENBUCKET`, the window
/// commands). `jitter_s` is added to `Retry-After` on a denial: pick it at random per response
/// (0 or 1 s is enough to stop clients denied in the same second from coming back together).
pub fn response(name: &str, policy: Policy, reply: [i64; 5], jitter_s: u64) -> Response {
    let [allowed, _limit, remaining, retry_after_ms, reset_after_ms] = reply;
    let (q, w) = quota(policy);
    let mut policy_field = format!("\"{name}\";q={q};w={w}");
    if policy.burst != policy.limit {
        policy_field += &format!(";{BURST_PARAMETER}={}", policy.burst);
    }
    let mut headers = vec![("RateLimit-Policy", policy_field)];
    if allowed > 0 {
        // r never above q: the policy item announces q per w.
        let r = u64::try_from(remaining).unwrap_or(0).min(q);
        let t = seconds_up(reset_after_ms);
        headers.push(("RateLimit", format!("\"{name}\";r={r};t={t}")));
        Response {
            status: 200,
            headers,
        }
    } else {
        // t equals Retry-After: the draft wants Retry-After no earlier than the end of t.
        let s = seconds_up(retry_after_ms).saturating_add(jitter_s);
        headers.push(("Retry-After", s.to_string()));
        headers.push(("RateLimit", format!("\"{name}\";r=0;t={s}")));
        Response {
            status: 429,
            headers,
        }
    }
}

/// One limiter of an `RL.ALL` call as its headers show it: the policy name (a token of your
/// choosing, distinct within the call), its policy, and the COST the call gave it.
#[derive(Clone, Copy, Debug)]
pub struct Limiter<'a> {
    pub name: &'a str,
    pub policy: Policy,
    pub cost: u64,
}

/// The response for an `RL.ALL` reply (`combined`, then `each` limiter's five fields, in the
/// call's order). One list item per limiter, in that order, in both fields:
/// - `RateLimit-Policy`: each limiter's item as for one policy (`q`, `w`, the burst parameter).
/// - Admitted (200): each item is that limiter's state after the call,
///   `r=min(remaining, q);t=ceil(reset_after_ms / 1000)`.
/// - Denied (429): `Retry-After` is `ceil(combined retry_after_ms / 1000)` plus the jitter. An
///   item of a limiter that denied it (charged, COST > 0, field 1 = 0) is `r=0;t=<its own
///   ceil(retry_after_ms / 1000) + the jitter>`, so `Retry-After` is never before any t. Every
///   other item — a limiter that would have admitted (nothing was spent on it), or one at COST
///   0 — is its state as it stands, as on a 200: the client sees which quota refused it.
pub fn response_all(
    limiters: &[Limiter<'_>],
    combined: [i64; 5],
    each: &[[i64; 5]],
    jitter_s: u64,
) -> Response {
    let mut policies = Vec::new();
    let mut states = Vec::new();
    let admitted = combined[0] > 0;
    for (limiter, fields) in limiters.iter().zip(each) {
        let [allowed, _limit, remaining, retry_after_ms, reset_after_ms] = *fields;
        let (q, w) = quota(limiter.policy);
        let mut item = format!("\"{}\";q={q};w={w}", limiter.name);
        if limiter.policy.burst != limiter.policy.limit {
            item += &format!(";{BURST_PARAMETER}={}", limiter.policy.burst);
        }
        policies.push(item);
        let denied_it = !admitted && limiter.cost > 0 && allowed == 0;
        states.push(if denied_it {
            let t = seconds_up(retry_after_ms).saturating_add(jitter_s);
            format!("\"{}\";r=0;t={t}", limiter.name)
        } else {
            let r = u64::try_from(remaining).unwrap_or(0).min(q);
            let t = seconds_up(reset_after_ms);
            format!("\"{}\";r={r};t={t}", limiter.name)
        });
    }
    let mut headers = vec![("RateLimit-Policy", policies.join(", "))];
    if admitted {
        headers.push(("RateLimit", states.join(", ")));
        return Response {
            status: 200,
            headers,
        };
    }
    let s = seconds_up(combined[3]).saturating_add(jitter_s);
    headers.push(("Retry-After", s.to_string()));
    headers.push(("RateLimit", states.join(", ")));
    Response {
        status: 429,
        headers,
    }
}

/// The server to call: `HOST PORT` from the arguments after L W B, else 127.0.0.1 on `env_port`
/// (`$PORT`, as `make run` takes it), else 6379.
pub fn server(host_port: &[String], env_port: Option<String>) -> (String, String) {
    let env_port = || {
        env_port
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "6379".into())
    };
    match host_port {
        [host, port, ..] => (host.clone(), port.clone()),
        [host] => (host.clone(), env_port()),
        [] => ("127.0.0.1".into(), env_port()),
    }
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: http_headers KEY L W [B] [HOST PORT]";
    let (key, numbers) = args.split_first().ok_or(usage)?;
    let number = |i: usize| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(numbers.get(i).ok_or(usage)?.parse()?)
    };
    let (limit, window_ms) = (number(0)?, number(1)?);
    let burst = number(2).unwrap_or(limit);
    let (host, port) = server(&numbers[numbers.len().min(3)..], std::env::var("PORT").ok());
    let mut c = redis::Client::open(format!("redis://{host}:{port}/"))?.get_connection()?;
    let reply: Vec<i64> = redis::cmd("RL.GCRA")
        .arg(key)
        .arg(limit)
        .arg(window_ms)
        .arg("BURST")
        .arg(burst)
        .query(&mut c)?;
    let reply: [i64; 5] = reply.try_into().map_err(|_| "not a five-integer reply")?;
    // A random whole second from the clock's nanoseconds: enough for an example.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos();
    let policy = Policy {
        limit,
        window_ms,
        burst,
    };
    let response = response("default", policy, reply, u64::from(nanos % 2));
    println!("reply: {reply:?}");
    let reason = match response.status {
        200 => "OK",
        _ => "Too Many Requests",
    };
    println!("HTTP/1.1 {} {reason}", response.status);
    for (name, value) in response.headers {
        println!("{name}: {value}");
    }
    Ok(())
}
