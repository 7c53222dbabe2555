//! The admission core on a fixed limit and explicit times: who is admitted, queued, shed, and
//! in which order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::limit::{FixedLimit, LimitAlgorithm, Sample};

const MS: Duration = Duration::from_millis(1);

#[derive(Clone, Debug)]
struct W(&'static str, Arc<AtomicBool>);

impl W {
    fn new(name: &'static str) -> W {
        W(name, Arc::new(AtomicBool::new(false)))
    }
}

impl Waiter for W {
    fn is_closed(&self) -> bool {
        self.1.load(Ordering::SeqCst)
    }
}

fn core(limit: usize, max_queue: Option<usize>) -> Admission<W> {
    let settings = QueueSettings {
        max_queue,
        ..QueueSettings::default()
    };
    Admission::new(Box::new(FixedLimit(limit)), settings)
}

fn ticket(tier: Tier, tenant: &str) -> Ticket {
    Ticket {
        tier,
        tenant: tenant.to_string(),
    }
}

/// Arrives and returns the grant if admitted at once.
fn arrive(
    a: &mut Admission<W>,
    out: &mut Vec<Settled<W>>,
    t: Ticket,
    name: &'static str,
) -> Arrival {
    a.arrive(Duration::ZERO, &t, W::new(name), out)
}

fn names(out: &[Settled<W>]) -> Vec<(&'static str, Option<Reason>)> {
    out.iter()
        .map(|s| (s.waiter.0, s.outcome.as_ref().err().map(|r| r.reason)))
        .collect()
}

fn grant(a: Arrival) -> Grant {
    match a {
        Arrival::Admitted(g) => g,
        _ => panic!("not admitted"),
    }
}

#[test]
fn admits_to_the_limit_queues_then_sheds_at_once() {
    let mut a = core(2, Some(1));
    let mut out = Vec::new();
    let g1 = grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "1"));
    let _g2 = grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "2"));
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "3"),
        Arrival::Queued { .. }
    ));
    let Arrival::Rejected(r) = arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "4") else {
        panic!("not shed");
    };
    assert_eq!(r.reason, Reason::Overloaded);
    assert_eq!(r.retry_after, Duration::from_secs(1));
    a.complete(5 * MS, &g1, Completion::Answered, &mut out);
    assert_eq!(names(&out), [("3", None)]);
    assert_eq!((a.in_flight(), a.queued()), (2, 0));
}

#[test]
fn the_lowest_tier_is_shed_first_and_critical_last() {
    let mut a = core(1, Some(2));
    let mut out = Vec::new();
    let g = grant(arrive(
        &mut a,
        &mut out,
        ticket(Tier::Batch, "t"),
        "running",
    ));
    for (tier, name) in [(Tier::Batch, "batch"), (Tier::Sheddable, "sheddable")] {
        assert!(matches!(
            arrive(&mut a, &mut out, ticket(tier, "t"), name),
            Arrival::Queued { .. }
        ));
    }
    // Each higher arrival takes the place of the lowest queued one.
    arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "default");
    arrive(&mut a, &mut out, ticket(Tier::Critical, "t"), "critical");
    assert_eq!(
        names(&out),
        [
            ("batch", Some(Reason::Overloaded)),
            ("sheddable", Some(Reason::Overloaded))
        ]
    );
    // A lower arrival is shed itself.
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Sheddable, "t"), "late"),
        Arrival::Rejected(_)
    ));
    // Critical is shed only by critical: when it alone fills the queue.
    arrive(&mut a, &mut out, ticket(Tier::Critical, "t"), "critical2");
    out.clear();
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Critical, "t"), "critical3"),
        Arrival::Rejected(_)
    ));
    // The place that frees goes to the critical request that waited longest.
    a.complete(MS, &g, Completion::Answered, &mut out);
    assert_eq!(names(&out), [("critical", None)]);
}

#[test]
fn a_flooding_tenant_is_shed_before_a_tenant_within_its_share() {
    let mut a = core(4, None);
    let mut out = Vec::new();
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(grant(arrive(
            &mut a,
            &mut out,
            ticket(Tier::Default, "flood"),
            "f",
        )));
    }
    for _ in 0..4 {
        assert!(matches!(
            arrive(&mut a, &mut out, ticket(Tier::Default, "flood"), "f"),
            Arrival::Queued { .. }
        ));
    }
    // The queue is full of the flooder's requests: a polite tenant takes one's place.
    arrive(&mut a, &mut out, ticket(Tier::Default, "polite"), "p");
    assert_eq!(names(&out), [("f", Some(Reason::OverShare))]);
    // And goes first when a place frees, though it came last.
    out.clear();
    let g = running.pop().unwrap();
    a.complete(MS, &g, Completion::Answered, &mut out);
    assert_eq!(names(&out), [("p", None)]);
    // The flooder arriving on a full queue is shed itself, with the reason.
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Default, "flood"), "f"),
        Arrival::Queued { .. }
    ));
    let Arrival::Rejected(r) = arrive(&mut a, &mut out, ticket(Tier::Default, "flood"), "f") else {
        panic!("not shed");
    };
    assert_eq!(r.reason, Reason::OverShare);
}

#[test]
fn a_tenant_over_its_share_is_shed_before_another_within_it_whatever_the_tiers() {
    let mut a = core(4, None);
    let mut out = Vec::new();
    for _ in 0..4 {
        grant(arrive(
            &mut a,
            &mut out,
            ticket(Tier::Critical, "flood"),
            "run",
        ));
    }
    for _ in 0..4 {
        arrive(&mut a, &mut out, ticket(Tier::Critical, "flood"), "f");
    }
    // A batch request of a tenant within its share takes a critical one's place.
    arrive(&mut a, &mut out, ticket(Tier::Batch, "polite"), "p");
    assert_eq!(names(&out), [("f", Some(Reason::OverShare))]);
}

#[test]
fn weights_give_a_tenant_a_larger_share() {
    let settings = QueueSettings {
        weights: HashMap::from([("gold".to_string(), 3)]),
        ..QueueSettings::default()
    };
    let mut a: Admission<W> = Admission::new(Box::new(FixedLimit(4)), settings);
    let mut out = Vec::new();
    for t in ["gold", "gold", "gold", "tin"] {
        grant(arrive(&mut a, &mut out, ticket(Tier::Default, t), "run"));
    }
    // gold has 3 of its 3; tin 1 of its 1: a gold and a tin arrival are both within share,
    // the gold one is better placed (3 + 1 of 3 vs 1 + 1 of 1 is equal; the older goes first).
    arrive(&mut a, &mut out, ticket(Tier::Default, "gold"), "gold");
    arrive(&mut a, &mut out, ticket(Tier::Default, "tin"), "tin");
    assert!(a.precedence(Tier::Default, "gold") > a.precedence(Tier::Default, "tin"));
}

#[test]
fn a_queue_that_stands_is_cut_to_the_target() {
    let settings = QueueSettings {
        target: Some(5 * MS),
        interval: Some(100 * MS),
        ..QueueSettings::default()
    };
    let mut a: Admission<W> = Admission::new(Box::new(FixedLimit(1)), settings);
    let mut out = Vec::new();
    let mut g = grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "run"));
    assert_eq!(a.allowed_wait(Tier::Default), 100 * MS);
    // Each request waits 20 ms (> target 5 ms) for 100 ms: the queue stands.
    let mut now = Duration::ZERO;
    for _ in 0..6 {
        a.arrive(now, &ticket(Tier::Default, "t"), W::new("q"), &mut out);
        now += 20 * MS;
        out.clear();
        a.complete(now, &g, Completion::Answered, &mut out);
        g = match out.pop().map(|s| s.outcome) {
            Some(Ok(g)) => g,
            _ => panic!("not admitted"),
        };
    }
    assert_eq!(a.allowed_wait(Tier::Default), 5 * MS);
    // A request now waits at most 5 ms.
    a.arrive(now, &ticket(Tier::Default, "t"), W::new("late"), &mut out);
    out.clear();
    a.expire(now + 6 * MS, &mut out);
    assert_eq!(names(&out), [("late", Some(Reason::QueueTimeout))]);
    // Short waits again: the queue is no longer standing.
    a.arrive(
        now + 6 * MS,
        &ticket(Tier::Default, "t"),
        W::new("quick"),
        &mut out,
    );
    out.clear();
    a.complete(now + 7 * MS, &g, Completion::Answered, &mut out);
    assert_eq!(a.allowed_wait(Tier::Default), 100 * MS);
}

#[test]
fn a_cancelled_waiter_leaves_no_count() {
    let mut a = core(1, None);
    let mut out = Vec::new();
    let g = grant(arrive(&mut a, &mut out, ticket(Tier::Default, "a"), "run"));
    let w = W::new("gone");
    a.arrive(
        Duration::ZERO,
        &ticket(Tier::Default, "b"),
        w.clone(),
        &mut out,
    );
    assert_eq!((a.queued(), a.active_tenants()), (1, 2));
    w.1.store(true, Ordering::SeqCst);
    a.complete(MS, &g, Completion::Cancelled, &mut out);
    assert!(out.is_empty());
    assert_eq!((a.in_flight(), a.queued(), a.active_tenants()), (0, 0, 0));
}

#[test]
fn a_cardinality_attack_is_held_to_bounded_memory() {
    let settings = QueueSettings {
        max_tenants: 20,
        ..QueueSettings::default()
    };
    let mut a: Admission<W> = Admission::new(Box::new(FixedLimit(100)), settings);
    let mut out = Vec::new();
    let mut grants = Vec::new();
    for i in 0..2_000 {
        let t = Ticket {
            tier: Tier::Default,
            tenant: format!("key-{i}"),
        };
        if let Arrival::Admitted(g) = a.arrive(Duration::ZERO, &t, W::new("x"), &mut out) {
            grants.push(g);
        }
    }
    // 20 tenants counted apart, the other 1,980 keys in the one overflow entry.
    assert_eq!(a.active_tenants(), 21);
    assert_eq!((a.in_flight(), a.queued()), (100, 100));
    // Completing every request lets the queue in, and completing those empties the table.
    while !grants.is_empty() {
        for g in grants.drain(..) {
            a.complete(MS, &g, Completion::Cancelled, &mut out);
        }
        grants.extend(out.drain(..).filter_map(|s| s.outcome.ok()));
    }
    assert_eq!((a.in_flight(), a.active_tenants()), (0, 0));
}

/// A limit the test sets between steps, reporting a no-load latency once one is given.
struct SharedLimit(Arc<AtomicUsize>, Option<Duration>);

impl LimitAlgorithm for SharedLimit {
    fn on_sample(&mut self, _: Sample) {}
    fn limit(&self) -> usize {
        self.0.load(Ordering::SeqCst).max(1)
    }
    fn observed(&self) -> crate::limit::Observed {
        crate::limit::Observed {
            min_rtt: self.1,
            ..Default::default()
        }
    }
}

/// Builds a history of admissions on a core of limit 100 whose limit the test then sets: each
/// tenant in `holders` holds one place throughout (a tenant's history lasts while it is
/// active), and another place serves `round` `n` times over, each request finishing at once.
fn history(n: usize, holders: &[&str], round: &[&str]) -> (Admission<W>, Arc<AtomicUsize>) {
    let limit = Arc::new(AtomicUsize::new(100));
    let mut a: Admission<W> = Admission::new(
        Box::new(SharedLimit(limit.clone(), None)),
        QueueSettings::default(),
    );
    let mut out = Vec::new();
    for t in holders {
        grant(arrive(&mut a, &mut out, ticket(Tier::Default, t), "holder"));
    }
    for _ in 0..n {
        for t in round {
            let g = grant(arrive(&mut a, &mut out, ticket(Tier::Default, t), "old"));
            a.complete(MS, &g, Completion::Answered, &mut out);
        }
    }
    (a, limit)
}

#[test]
fn a_tenants_second_request_is_not_taken_for_a_flood_when_its_history_is_light() {
    // The flooder took four of every five admissions; each holds one of 3 places.
    let round = ["flood", "flood", "flood", "flood", "light"];
    let (mut a, limit) = history(200, &["flood", "light"], &round);
    limit.store(3, Ordering::SeqCst);
    let mut out = Vec::new();
    // The flooder's critical requests wait for the last place, which is kept for tenants
    // within their share.
    for _ in 0..2 {
        assert!(matches!(
            arrive(&mut a, &mut out, ticket(Tier::Critical, "flood"), "f"),
            Arrival::Queued { .. }
        ));
    }
    // The light tenant's second request puts it over its share of places at this instant
    // (2 of 1.5), as the flooder is; their histories tell them apart, whatever the tiers.
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Batch, "light"), "second"),
        Arrival::Admitted(_)
    ));
    assert!(out.is_empty());
}

#[test]
fn a_tenant_over_its_share_leaves_the_last_places_to_the_others() {
    let round = ["flood", "flood", "flood", "flood", "light"];
    let (mut a, limit) = history(200, &["flood", "light"], &round);
    // Limit 16: 2 √16 = 8 places kept for tenants within their share.
    limit.store(16, Ordering::SeqCst);
    let mut out = Vec::new();
    // The flooder takes its share of places (8 of 16 with the light tenant active), then waits
    // though places are free: it is over its share, and the last 8 are kept for the others.
    let mut admitted = 0;
    for _ in 0..10 {
        if let Arrival::Admitted(_) = arrive(&mut a, &mut out, ticket(Tier::Critical, "flood"), "f")
        {
            admitted += 1;
        }
    }
    assert_eq!((admitted, a.in_flight(), a.queued()), (7, 9, 3));
    // Tenants within their share are admitted at once, passing the flooder's queued requests.
    for name in ["new1", "new2", "light"] {
        assert!(matches!(
            arrive(&mut a, &mut out, ticket(Tier::Batch, name), name),
            Arrival::Admitted(_)
        ));
    }
    assert_eq!((a.in_flight(), a.queued()), (12, 3));
    assert!(out.is_empty());
}

#[test]
fn tenants_sharing_evenly_are_ordered_by_tier() {
    let (mut a, limit) = history(500, &["a", "b"], &["a", "b"]);
    limit.store(3, Ordering::SeqCst);
    let mut out = Vec::new();
    grant(arrive(&mut a, &mut out, ticket(Tier::Default, "b"), "run"));
    for _ in 0..3 {
        arrive(&mut a, &mut out, ticket(Tier::Critical, "a"), "a-critical");
    }
    // b is over its share of places now, as a is, and neither is heavy: b's batch request does
    // not pass a's critical ones.
    let Arrival::Rejected(r) = arrive(&mut a, &mut out, ticket(Tier::Batch, "b"), "b-batch") else {
        panic!("not shed");
    };
    assert_eq!(r.reason, Reason::Overloaded);
    assert!(out.is_empty());
}

#[test]
fn waits_follow_the_no_load_latency_and_critical_waits_longest() {
    let limit = Arc::new(AtomicUsize::new(1));
    let unmeasured: Admission<W> = Admission::new(
        Box::new(SharedLimit(limit.clone(), None)),
        QueueSettings::default(),
    );
    assert_eq!(unmeasured.allowed_wait(Tier::Critical), 100 * MS);
    assert_eq!(unmeasured.allowed_wait(Tier::Batch), 100 * MS);

    let settings = QueueSettings {
        max_queue: Some(2),
        ..QueueSettings::default()
    };
    let mut a: Admission<W> = Admission::new(Box::new(SharedLimit(limit, Some(12 * MS))), settings);
    let mut out = Vec::new();
    grant(arrive(&mut a, &mut out, ticket(Tier::Default, "a"), "run"));
    arrive(&mut a, &mut out, ticket(Tier::Critical, "b"), "critical");
    arrive(&mut a, &mut out, ticket(Tier::Default, "c"), "default");
    assert_eq!(a.allowed_wait(Tier::Default), 6 * MS);
    assert_eq!(a.allowed_wait(Tier::Critical), 24 * MS);
    // Half the no-load latency sheds the default request; the critical one waits two.
    a.expire(7 * MS, &mut out);
    assert_eq!(names(&out), [("default", Some(Reason::QueueTimeout))]);
    out.clear();
    a.expire(24 * MS, &mut out);
    assert!(out.is_empty());
    a.expire(25 * MS, &mut out);
    assert_eq!(names(&out), [("critical", Some(Reason::QueueTimeout))]);
}

/// A fixed limit with an overdraft for critical requests, and a limit outside its probes.
struct Overdraft {
    limit: usize,
    overdraft: usize,
    steady: usize,
}

impl LimitAlgorithm for Overdraft {
    fn on_sample(&mut self, _: Sample) {}
    fn limit(&self) -> usize {
        self.limit
    }
    fn steady_limit(&self) -> usize {
        self.steady
    }
    fn critical_overdraft(&self) -> usize {
        self.overdraft
    }
    fn observed(&self) -> crate::limit::Observed {
        crate::limit::Observed::default()
    }
}

fn overdrafting(limit: usize, overdraft: usize, steady: usize) -> Admission<W> {
    let alg = Overdraft {
        limit,
        overdraft,
        steady,
    };
    Admission::new(Box::new(alg), QueueSettings::default())
}

#[test]
fn a_critical_request_takes_the_overdraft_and_the_next_completions_give_it_back() {
    let mut a = overdrafting(2, 1, 2);
    let mut out = Vec::new();
    let mut running: Vec<Grant> = (0..2)
        .map(|_| grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "run")))
        .collect();
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "default"),
        Arrival::Queued { .. }
    ));
    // The service is full; a critical request goes past the limit by the overdraft, once.
    running.push(grant(arrive(
        &mut a,
        &mut out,
        ticket(Tier::Critical, "u"),
        "critical",
    )));
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Critical, "u"), "critical2"),
        Arrival::Queued { .. }
    ));
    assert_eq!(a.in_flight(), 3);
    // A completion frees a place within the overdraft: the waiting critical request takes it.
    let g = running.remove(0);
    a.complete(MS, &g, Completion::Answered, &mut out);
    assert_eq!(names(&out), [("critical2", None)]);
    // The next completion leaves 2 in flight, the limit: the default request still waits …
    out.clear();
    let g = running.remove(0);
    a.complete(MS, &g, Completion::Answered, &mut out);
    assert!(out.is_empty());
    // … until the borrowed place is given back.
    let g = running.remove(0);
    a.complete(MS, &g, Completion::Answered, &mut out);
    assert_eq!(names(&out), [("default", None)]);
}

#[test]
fn a_fixed_limit_has_no_overdraft() {
    let mut a = core(1, None);
    let mut out = Vec::new();
    grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "run"));
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Critical, "u"), "critical"),
        Arrival::Queued { .. }
    ));
}

#[test]
fn the_queue_keeps_its_steady_size_while_the_limit_probes() {
    // Probing at 1 of a steady 3: the queue still holds 3.
    let mut a = overdrafting(1, 0, 3);
    let mut out = Vec::new();
    grant(arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "run"));
    for _ in 0..3 {
        assert!(matches!(
            arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "wait"),
            Arrival::Queued { .. }
        ));
    }
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Default, "t"), "late"),
        Arrival::Rejected(_)
    ));
}

#[test]
fn during_a_flood_a_tenant_within_its_share_waits_as_long_as_a_critical_request() {
    // The flooder took four of every five admissions; a no-load latency of 12 ms is measured.
    let limit = Arc::new(AtomicUsize::new(100));
    let alg = SharedLimit(limit.clone(), Some(12 * MS));
    let settings = QueueSettings {
        max_queue: Some(4),
        ..QueueSettings::default()
    };
    let mut a: Admission<W> = Admission::new(Box::new(alg), settings);
    let mut out = Vec::new();
    for _ in 0..200 {
        for t in ["flood", "flood", "flood", "flood", "light"] {
            let g = grant(arrive(&mut a, &mut out, ticket(Tier::Default, t), "old"));
            a.complete(MS, &g, Completion::Answered, &mut out);
        }
    }
    limit.store(1, Ordering::SeqCst);
    grant(arrive(
        &mut a,
        &mut out,
        ticket(Tier::Default, "light"),
        "run",
    ));
    // Before any request over a share, a batch request waits its tier's time.
    let Arrival::Queued { wait } = arrive(&mut a, &mut out, ticket(Tier::Batch, "light"), "b1")
    else {
        panic!("not queued");
    };
    assert_eq!(wait, 6 * MS);
    // The flooder's request is over its share: a flood is on, and within-share requests wait
    // as long as critical ones (two no-load latencies), for 20 no-load latencies.
    assert!(matches!(
        arrive(&mut a, &mut out, ticket(Tier::Default, "flood"), "f"),
        Arrival::Queued { .. }
    ));
    let Arrival::Queued { wait } = arrive(&mut a, &mut out, ticket(Tier::Batch, "new"), "b2")
    else {
        panic!("not queued");
    };
    assert_eq!(wait, 24 * MS);
    assert_eq!(wait, a.allowed_wait(Tier::Critical));
    // Its queue entry is cut at the same wait, not at its tier's.
    a.expire(23 * MS, &mut out);
    assert!(!names(&out).contains(&("b2", Some(Reason::QueueTimeout))));
    a.expire(25 * MS, &mut out);
    assert!(names(&out).contains(&("b2", Some(Reason::QueueTimeout))));
    // Long after the flood's last request, the waits are the tiers' again.
    out.clear();
    let later = 12 * MS * 21;
    a.expire(later, &mut out);
    let t = ticket(Tier::Batch, "new");
    let Arrival::Queued { wait } = a.arrive(later, &t, W::new("b3"), &mut out) else {
        panic!("not queued");
    };
    assert_eq!(wait, 6 * MS);
}
