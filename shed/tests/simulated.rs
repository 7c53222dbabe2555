//! The admission core and the gradient limit in a discrete-event run: Poisson tenants in front
//! of a service of 8 workers × 10 ms (C = 800 requests a second) on a virtual clock, so the
//! issue's overload promises are checked without HTTP, sleeps or timing (the same seed gives the
//! same run). `make bench-shed` measures the same scenes through real HTTP.
//!
//! To look at other loads of the same scenes: `SIM_SEED=7 cargo test -p redis-ratelimit-shed
//! --test simulated -- --nocapture` prints each scene's figures for seed 7 (the bounds below
//! hold for the default seeds; the docs' ranges come from eight), and `SIM_WHY=1` adds each
//! well-behaved request lost, with its tier and reason.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use ratelimit_shed::admission::{Admission, Arrival, Completion, Grant, Settled};
use ratelimit_shed::gradient::{Gradient, GradientSettings};
use ratelimit_shed::limit::Bounds;
use ratelimit_shed::queue::Waiter;
use ratelimit_shed::{QueueSettings, Reason, Ticket, Tier};

const WORKERS: usize = 8;
const SERVICE_US: u64 = 10_000;
const CAPACITY: f64 = 800.0;
const TENANTS: usize = 20;
/// Requests arriving in this span count (the first second lets the limit settle).
const FROM_US: u64 = 1_000_000;
const TO_US: u64 = 5_500_000;
const RUN_US: u64 = 6_000_000;

/// A request's index into the run's list.
#[derive(Clone, Copy)]
struct Request(usize);

impl Waiter for Request {
    fn is_closed(&self) -> bool {
        false
    }
}

/// The seed from `SIM_SEED`, or the scene's own.
fn seed(default: u64) -> u64 {
    std::env::var("SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A small xorshift: the same load for the same seed.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 10 % critical, 60 % default, 20 % sheddable, 10 % batch.
    fn tier(&mut self) -> Tier {
        match self.uniform() {
            x if x < 0.1 => Tier::Critical,
            x if x < 0.7 => Tier::Default,
            x if x < 0.9 => Tier::Sheddable,
            _ => Tier::Batch,
        }
    }
}

#[derive(Clone, Copy)]
enum Event {
    Arrive(usize),
    Done(usize),
    /// Queue waits are checked every half millisecond, as the shedder's timers would.
    Tick,
}

struct Arrived {
    tenant: usize,
    tier: Tier,
    at: u64,
    /// The latency (µs) of a success, or why it was shed.
    fate: Option<Result<u64, Reason>>,
}

/// Poisson arrivals at `rates` (requests a second per tenant) from `from` for `span` µs.
fn arrivals(rng: &mut Rng, rates: &[f64], from: u64, span: u64, reqs: &mut Vec<Arrived>) {
    for (tenant, rate) in rates.iter().enumerate() {
        let mut at = 0.0;
        loop {
            at += -(1.0 - rng.uniform()).ln() / rate;
            if at * 1e6 > span as f64 {
                break;
            }
            reqs.push(Arrived {
                tenant,
                tier: rng.tier(),
                at: from + (at * 1e6) as u64,
                fate: None,
            });
        }
    }
}

/// Runs `rates` (requests a second per tenant) against the service for `RUN_US`, through the
/// shedder with its defaults.
fn run(rates: &[f64], seed: u64) -> Vec<Arrived> {
    let mut rng = Rng(seed);
    let mut reqs = Vec::new();
    arrivals(&mut rng, rates, 0, RUN_US, &mut reqs);
    let mut reqs = serve(reqs);
    reqs.retain(|r| r.at >= FROM_US && r.at < TO_US);
    reqs
}

/// Serves `reqs` (in any order) through the shedder with its defaults, returning each with
/// its fate.
fn serve(mut reqs: Vec<Arrived>) -> Vec<Arrived> {
    let end = reqs.iter().map(|r| r.at).max().unwrap_or(0);
    let mut events: BTreeMap<(u64, u64), Event> = BTreeMap::new();
    let mut seq = 0;
    let mut schedule = |events: &mut BTreeMap<(u64, u64), Event>, at: u64, e: Event| {
        seq += 1;
        events.insert((at, seq), e);
    };
    for (i, r) in reqs.iter().enumerate() {
        schedule(&mut events, r.at, Event::Arrive(i));
    }
    for tick in (0..end + 200_000).step_by(500) {
        schedule(&mut events, tick, Event::Tick);
    }

    let limit = Gradient::new(Bounds::default(), GradientSettings::default());
    let mut shed: Admission<Request> =
        Admission::new(Box::new(limit.expect("defaults")), QueueSettings::default());
    let mut grants: Vec<Option<Grant>> = (0..reqs.len()).map(|_| None).collect();
    let (mut busy, mut waiting) = (0, VecDeque::new());
    let mut settled: Vec<Settled<Request>> = Vec::new();
    while let Some(((now, _), event)) = events.pop_first() {
        let clock = Duration::from_micros(now);
        let mut started = Vec::new();
        match event {
            Event::Arrive(i) => {
                let ticket = Ticket {
                    tier: reqs[i].tier,
                    tenant: format!("tenant-{}", reqs[i].tenant),
                };
                match shed.arrive(clock, &ticket, Request(i), &mut settled) {
                    Arrival::Admitted(g) => {
                        grants[i] = Some(g);
                        started.push(i);
                    }
                    Arrival::Queued { .. } => {}
                    Arrival::Rejected(r) => reqs[i].fate = Some(Err(r.reason)),
                }
            }
            Event::Tick => shed.expire(clock, &mut settled),
            Event::Done(i) => {
                busy -= 1;
                reqs[i].fate = Some(Ok(now - reqs[i].at));
                if let Some(g) = grants[i].take() {
                    shed.complete(clock, &g, Completion::Answered, &mut settled);
                }
                if let Some(next) = waiting.pop_front() {
                    busy += 1;
                    schedule(&mut events, now + SERVICE_US, Event::Done(next));
                }
            }
        }
        for s in settled.drain(..) {
            match s.outcome {
                Ok(g) => {
                    grants[s.waiter.0] = Some(g);
                    started.push(s.waiter.0);
                }
                Err(r) => reqs[s.waiter.0].fate = Some(Err(r.reason)),
            }
        }
        // The service: 8 workers, the rest of what was admitted waits in its own line.
        for i in started {
            if busy < WORKERS {
                busy += 1;
                schedule(&mut events, now + SERVICE_US, Event::Done(i));
            } else {
                waiting.push_back(i);
            }
        }
    }
    reqs
}

fn success(reqs: &[&Arrived]) -> f64 {
    let ok = reqs
        .iter()
        .filter(|r| matches!(r.fate, Some(Ok(_))))
        .count();
    ok as f64 / reqs.len().max(1) as f64
}

/// The 99th percentile of the successes' latencies, in milliseconds.
fn p99_ms(reqs: &[&Arrived]) -> f64 {
    let mut ok: Vec<u64> = reqs
        .iter()
        .filter_map(|r| match r.fate {
            Some(Ok(l)) => Some(l),
            _ => None,
        })
        .collect();
    ok.sort_unstable();
    let at = (ok.len() * 99 / 100).min(ok.len().saturating_sub(1));
    ok.get(at).map_or(0.0, |&l| l as f64 / 1000.0)
}

fn per_second(n: usize) -> f64 {
    n as f64 / ((TO_US - FROM_US) as f64 / 1e6)
}

/// The flood's rates: 19 tenants asking 0.8 C together; tenant 0 asks 10 × an equal share
/// (0.5 C). Its max-min fair share is what the others leave: 0.2 C.
fn flood_rates() -> Vec<f64> {
    let mut rates = vec![0.8 * CAPACITY / (TENANTS - 1) as f64; TENANTS];
    rates[0] = 10.0 * CAPACITY / TENANTS as f64;
    rates
}

/// The well-behaved tenants' success and the flooder's successes per second over its max-min
/// share, among the requests arriving in `from .. to`; printed with where the well-behaved
/// losses fall (per 100 ms), for the reader of a failed run.
fn flood_figures(reqs: &[Arrived], from: u64, to: u64) -> (f64, f64) {
    let within: Vec<&Arrived> = reqs.iter().filter(|r| r.at >= from && r.at < to).collect();
    let polite: Vec<&Arrived> = within.iter().copied().filter(|r| r.tenant != 0).collect();
    let flooder = within
        .iter()
        .filter(|r| r.tenant == 0 && matches!(r.fate, Some(Ok(_))))
        .count();
    let mut lost: BTreeMap<u64, usize> = BTreeMap::new();
    for r in polite.iter().filter(|r| !matches!(r.fate, Some(Ok(_)))) {
        *lost.entry((r.at - from) / 100_000 * 100).or_default() += 1;
        if std::env::var("SIM_WHY").is_ok() {
            eprintln!("lost {:?} {:?} at {}", r.tier, r.fate, r.at - from);
        }
    }
    let polite_ok = success(&polite);
    let flooder_share = flooder as f64 / ((to - from) as f64 / 1e6) / (0.2 * CAPACITY);
    eprintln!(
        "well-behaved {:.2} % of {} (p99 {:.1} ms), flooder {flooder_share:.2} × its share; lost per ms: {lost:?}",
        polite_ok * 100.0,
        polite.len(),
        p99_ms(&polite)
    );
    (polite_ok, flooder_share)
}

#[test]
fn a_flooding_tenant_gets_what_the_others_leave_and_they_lose_almost_nothing() {
    let reqs = run(&flood_rates(), seed(97));
    let (polite_ok, flooder_share) = flood_figures(&reqs, FROM_US, TO_US);
    assert!(polite_ok >= 0.99, "well-behaved success {polite_ok:.3}");
    assert!(
        flooder_share <= 1.1,
        "flooder at {flooder_share:.2} of its share"
    );
    // And the flooder is not starved either: the service stays busy. (0.79 here, 0.74–1.01 over
    // eight seeds: the share is against the others' nominal 0.8 C, and a seed whose Poisson
    // draw asks more of them leaves the flooder less.)
    assert!(
        flooder_share >= 0.7,
        "flooder at {flooder_share:.2} of its share"
    );
}

#[test]
fn at_five_times_capacity_critical_passes_and_the_service_stays_busy() {
    let reqs = run(&[5.0 * CAPACITY / TENANTS as f64; TENANTS], seed(11));
    let critical: Vec<&Arrived> = reqs.iter().filter(|r| r.tier == Tier::Critical).collect();
    let batch: Vec<&Arrived> = reqs.iter().filter(|r| r.tier == Tier::Batch).collect();
    // Goodput: successes within twice the service time and a half (the bench's bound is twice
    // the unloaded p99, which on a real machine is about 13 ms for this service).
    let good = reqs
        .iter()
        .filter(|r| matches!(r.fate, Some(Ok(l)) if l <= 26_000))
        .count();
    let goodput = per_second(good) / CAPACITY;
    let critical_p99 = p99_ms(&critical);
    eprintln!(
        "5 x C: critical {:.2} % (p99 {critical_p99:.1} ms), batch {:.2} %, goodput {goodput:.3} C",
        success(&critical) * 100.0,
        success(&batch) * 100.0
    );
    assert!(
        success(&critical) >= 0.99,
        "critical {:.3}",
        success(&critical)
    );
    // Twice the no-load latency (10 ms here, without a real machine's jitter) and a tenth:
    // eight seeds gave 19.2–21.2 ms, against 24.5–26.2 before critical requests could take the
    // gradient's overdraft.
    assert!(critical_p99 <= 22.0, "critical p99 {critical_p99:.1} ms");
    assert!(success(&batch) <= 0.05, "batch {:.3}", success(&batch));
    assert!(goodput >= 0.95, "goodput {goodput:.3} C");
}

/// The bench's order: even load at 0.5, 1, 2 and 5 × C, 2 s each, then the flood, counted from
/// its first request. The shedder comes to the flood with a history in which every tenant took
/// an even part and a limit set by even overload (about 10), and its periodic probe falls in
/// the flood (at about 1.85 s). Eight seeds: 99.03–99.60 % (99.35 % on average; 97.5 % before
/// the fast history counted arrivals and tenants within their share waited as long as critical
/// requests during a flood). What is left: the probe's few tens of milliseconds at ¾ of the
/// workers, and the well-behaved tenants' own bursts while the flooder fills its max-min share.
#[test]
fn a_flood_after_even_overload_costs_the_others_little_from_its_start() {
    const PHASE_US: u64 = 2_000_000;
    // The bench waits for a phase's last answers before the next starts.
    const GAP_US: u64 = 50_000;
    let mut rng = Rng(seed(41));
    let mut reqs = Vec::new();
    let mut from = 0;
    for load in [0.5, 1.0, 2.0, 5.0] {
        let rates = vec![load * CAPACITY / TENANTS as f64; TENANTS];
        arrivals(&mut rng, &rates, from, PHASE_US, &mut reqs);
        from += PHASE_US + GAP_US;
    }
    arrivals(&mut rng, &flood_rates(), from, PHASE_US, &mut reqs);
    let reqs = serve(reqs);
    let (polite_ok, flooder_share) = flood_figures(&reqs, from, from + PHASE_US);
    assert!(polite_ok >= 0.99, "well-behaved success {polite_ok:.3}");
    assert!(
        flooder_share <= 1.1,
        "flooder at {flooder_share:.2} of its share"
    );
}
