//! What a run says: per system and load, goodput against C, p50/p99 and success per tier, where
//! our limit settled; per system, the flood and the slowdown; as docs/performance.md's tables.

use std::fmt::Write;
use std::time::Duration;

use ratelimit_shed::Tier;

use crate::load::{ms, pct, Outcome};
use crate::systems::CAPACITY;

pub struct Row {
    pub system: String,
    pub load: f64,
    pub goodput: f64,
    pub p99_ok: Option<Duration>,
    pub tiers: Vec<(Option<Duration>, Option<Duration>, f64)>,
    /// The mean time a worker was held per request (the service time the machine delivered).
    pub held: Option<Duration>,
    /// Where our limit was during the run (mean, min–max) and the no-load latency at its end.
    pub limit: String,
}

pub fn summarize(load: f64, out: &[Outcome], good_within: Duration, span: Duration) -> Row {
    let good = out
        .iter()
        .filter(|o| o.ok && o.latency <= good_within)
        .count();
    let tiers = Tier::ALL
        .iter()
        .map(|t| {
            let of: Vec<&Outcome> = out.iter().filter(|o| o.tier == *t).collect();
            let lat: Vec<Duration> = of.iter().filter(|o| o.ok).map(|o| o.latency).collect();
            let success = of.iter().filter(|o| o.ok).count() as f64 / of.len().max(1) as f64;
            (pct(lat.clone(), 0.5), pct(lat, 0.99), success)
        })
        .collect();
    Row {
        system: String::new(),
        load,
        goodput: good as f64 / span.as_secs_f64() / CAPACITY,
        p99_ok: pct(
            out.iter().filter(|o| o.ok).map(|o| o.latency).collect(),
            0.99,
        ),
        tiers,
        held: None,
        limit: "–".into(),
    }
}

/// The flood phase: the well-behaved tenants' success (all, worst) and the flooder's served
/// rate over its max-min fair share of what the workers delivered, given what each tenant asked
/// (`offered`, per second): the others asking less than an equal share get all of it, and the
/// flooder what they leave. (Taking what the others were *served* instead calls any flooder fair
/// that crowds them out, since it is then served exactly what they did not get.)
pub struct Flood {
    pub polite_ok: f64,
    pub worst_polite: f64,
    pub flooder_over_share: f64,
}

pub fn flood(out: &[Outcome], offered: &[f64], span: Duration, capacity: f64) -> Flood {
    let tenants = offered.len();
    let polite: Vec<&Outcome> = out.iter().filter(|o| o.tenant != 0).collect();
    let polite_ok = polite.iter().filter(|o| o.ok).count() as f64 / polite.len().max(1) as f64;
    let worst_polite = (1..tenants)
        .map(|t| {
            let of: Vec<&&Outcome> = polite.iter().filter(|o| o.tenant == t).collect();
            of.iter().filter(|o| o.ok).count() as f64 / of.len().max(1) as f64
        })
        .fold(1.0, f64::min);
    let flooder = out.iter().filter(|o| o.tenant == 0 && o.ok).count() as f64 / span.as_secs_f64();
    Flood {
        polite_ok,
        worst_polite,
        flooder_over_share: flooder / max_min_share(offered, capacity, 0),
    }
}

/// The well-behaved tenants' failures in the flood by tier and reason, as "tier reason n, …".
pub fn losses(out: &[Outcome]) -> String {
    let mut counts: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for o in out.iter().filter(|o| o.tenant != 0) {
        if let Some(why) = o.failed {
            *counts.entry((o.tier.name(), why)).or_default() += 1;
        }
    }
    let polite = out.iter().filter(|o| o.tenant != 0).count();
    // Where in the phase: losses that bunch in a few 100 ms buckets are a probe's or a
    // stall's; spread ones are the limit's.
    let mut buckets: std::collections::BTreeMap<u128, usize> = Default::default();
    for o in out.iter().filter(|o| o.tenant != 0 && o.failed.is_some()) {
        *buckets.entry(o.at.as_millis() / 100).or_default() += 1;
    }
    let when: Vec<String> = buckets
        .iter()
        .map(|(b, n)| format!("{}ms:{n}", b * 100))
        .collect();
    let listed: Vec<String> = counts
        .iter()
        .map(|((tier, why), n)| format!("{tier} {why} {n}"))
        .collect();
    format!(
        "well-behaved lost {} of {polite}: {}; by 100 ms of arrival: {}",
        counts.values().sum::<usize>(),
        listed.join(", "),
        when.join(" ")
    )
}

/// Tenant `who`'s max-min fair share of `capacity` given what each asks: water-filling, the
/// smallest asks met first, each of the rest an equal part of what is left.
fn max_min_share(asks: &[f64], capacity: f64, who: usize) -> f64 {
    let mut order: Vec<usize> = (0..asks.len()).collect();
    order.sort_by(|a, b| asks[*a].total_cmp(&asks[*b]));
    let mut left = capacity;
    for (n, t) in order.iter().enumerate() {
        let part = (left / (asks.len() - n) as f64).min(asks[*t]);
        if *t == who {
            return part.max(f64::MIN_POSITIVE);
        }
        left -= part;
    }
    f64::MIN_POSITIVE
}

/// From which 100 ms bucket of arrivals in `from..to` on every later bucket's p99 of successes
/// is within `bound`, as the time since `from`; `None` if the last bucket is not.
pub fn settled_within(
    out: &[Outcome],
    from: Duration,
    to: Duration,
    bound: Duration,
) -> Option<Duration> {
    let bucket = Duration::from_millis(100);
    let n = ((to - from).as_millis() / bucket.as_millis()) as usize;
    let mut buckets: Vec<Vec<Duration>> = vec![Vec::new(); n];
    for o in out.iter().filter(|o| o.ok && o.at >= from && o.at < to) {
        let b = ((o.at - from).as_millis() / bucket.as_millis()) as usize;
        if let Some(v) = buckets.get_mut(b) {
            v.push(o.latency);
        }
    }
    let ok = |v: &Vec<Duration>| pct(v.clone(), 0.99).is_none_or(|p| p <= bound);
    (0..n)
        .find(|b| buckets[*b..].iter().all(ok))
        .map(|b| bucket * b as u32)
}

/// Successes per second among the arrivals in `from..to`, as a fraction of C.
pub fn served(out: &[Outcome], from: Duration, to: Duration) -> f64 {
    let n = out
        .iter()
        .filter(|o| o.ok && o.at >= from && o.at < to)
        .count();
    n as f64 / (to - from).as_secs_f64() / CAPACITY
}

/// The slowdown phase, per system.
pub struct Slowdown {
    /// p99 back within 2× the slowed service's unloaded p99, and within 2× the normal one.
    pub back_slow: Option<Duration>,
    pub back_normal: Option<Duration>,
    /// After the speed-up: p99 back within 2× unloaded, and the served rate in its last second.
    pub back_fast: Option<Duration>,
    pub served_fast: f64,
    pub limit: String,
}

pub fn rows_table(rows: &[Row]) -> String {
    let mut md = String::from("| system | load | goodput | critical p50/p99 | default p50/p99 | sheddable p50/p99 | batch p50/p99 | success c/d/s/b | worker held (ms) | our limit: mean (min–max) |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let t = |i: usize| {
            r.tiers
                .get(i)
                .map_or("–".into(), |(a, b, _)| format!("{}/{}", ms(*a), ms(*b)))
        };
        let succ: Vec<String> = r
            .tiers
            .iter()
            .map(|(_, _, s)| format!("{:.0}", s * 100.0))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {}×C | {:.2} | {} | {} | {} | {} | {} % | {} | {} |",
            r.system,
            r.load,
            r.goodput,
            t(0),
            t(1),
            t(2),
            t(3),
            succ.join("/"),
            ms(r.held),
            r.limit
        );
    }
    md
}

pub fn phases_table(names: &[String], floods: &[Flood], slows: &[Slowdown]) -> String {
    let at =
        |d: &Option<Duration>| d.map_or("not within".into(), |d| format!("{} ms", d.as_millis()));
    let mut md = String::from("| system | well-behaved success (all / worst tenant) | flooder ÷ its max-min fair share | after the 2× slowdown: p99 within 2× the slow service's unloaded p99 (2× the normal one) | after the speed-up: p99 within 2× unloaded; served in its last second | our limit slow → fast |\n|---|---|---|---|---|---|\n");
    for ((name, f), s) in names.iter().zip(floods).zip(slows) {
        let _ = writeln!(
            md,
            "| {name} | {:.1} % / {:.1} % | {:.2} | {} ({}) | {}; {:.2} C | {} |",
            f.polite_ok * 100.0,
            f.worst_polite * 100.0,
            f.flooder_over_share,
            at(&s.back_slow),
            at(&s.back_normal),
            at(&s.back_fast),
            s.served_fast,
            s.limit
        );
    }
    md
}
