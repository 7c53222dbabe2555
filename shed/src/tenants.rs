//! Requests in flight and queued per tenant, and each active tenant's fair share of the limit.
//! A tenant is active while it has a request in flight or queued; its entry goes when it has
//! none, so the table holds at most `in flight + queued` entries, and never more than
//! `max_tenants` plus one: past that, new keys share one overflow entry (a cardinality attack gets one
//! share, not one per key).
//!
//! Beside the counts at this instant, a history holds each tenant's part of the recent admissions
//! (the last thousand or so, decaying geometrically, counted in admissions rather than seconds so
//! that it means the same for a 1 ms and a 1 s service). A count at one instant cannot tell a
//! flooder from a well-behaved tenant once a share is about one place (20 tenants on a limit of
//! 12): both are over it with their second request. Over time they differ: the well-behaved
//! tenant's part of the admissions is about its share, the flooder's several times it. `heavy`
//! is that test. The history outlives a tenant's active entry: a flooder held back until it has
//! nothing in flight would otherwise come back with a clean slate and its tier's precedence, and
//! take the others' places again (measured: a flooder at 10 × its share then got 1.9 × its
//! max-min share). It is bounded like the active table (`max_tenants` entries) and forgets a
//! tenant once its part has decayed to almost nothing.

use std::collections::HashMap;
use std::sync::Arc;

/// The key every tenant beyond `max_tenants` shares.
pub const OVERFLOW: &str = "\u{0}overflow";

/// How many recent admissions the history weighs, about: each older one counts `1 − 1/N` of the
/// next. Enough that 20 tenants sharing a service evenly stay well within `HEAVY` of their share
/// by chance alone (about 50 admissions each, a spread of about 7).
const REMEMBERED_ADMISSIONS: f64 = 1000.0;
const DECAY: f64 = 1.0 - 1.0 / REMEMBERED_ADMISSIONS;
/// A tenant whose part of the recent admissions is above this many times its share is heavy.
const HEAVY: f64 = 1.5;
/// The fast history: about the last hundred *arrivals*, what each tenant asks rather than what
/// it was given. The slow one, from an even start (the flood follows a phase in which every
/// tenant took its share), takes about 80 admissions to call a tenant heavy that takes 38 % of
/// them (a flooder at 10 × its share among 20): 100 ms on a service of 800 a second, in which
/// it filled every place the others did not. Counted in admissions the fast one still needed
/// the flooder to be admitted tens of times; counted in arrivals it sees a flooder that asks 38 %
/// of everything within a few tens of arrivals, admitted or not (the simulated flood in the
/// bench's order lost 0.3 points fewer, most of them in its first 100 ms).
const FAST_ARRIVALS: f64 = 100.0;
const FAST_DECAY: f64 = 1.0 - 1.0 / FAST_ARRIVALS;
/// Heavy by the fast history: above this many times its share of the last hundred or so. With
/// so few arrivals an even part is noisy (20 tenants: 5 each, a spread of about 1.6), so the
/// bar is higher than `HEAVY`: 3 × is six spreads above an even part.
const FAST_HEAVY: f64 = 3.0;
/// … and at least this many of them (decayed), so that among many tenants, whose even part is
/// well below one arrival, two arrivals close together do not make one heavy.
const FAST_FLOOR: f64 = 3.0;
/// A tenant whose decayed count fell below this is forgotten (about 3,000 admissions of others
/// after its last one).
const FORGOTTEN: f64 = 0.05;
/// The history is swept for forgotten tenants once per this many admissions, and when it is
/// full, at most once per this many arrivals (a stream of new keys, each asking once, would
/// otherwise keep it full between sweeps and a new flooder out of it).
const SWEEP_EVERY: u64 = 1_000;

/// A tenant's weight: as given, or 1 (a weight of 0 counts as 1).
fn weight_in(weights: &HashMap<String, u32>, key: &str) -> u32 {
    weights.get(key).copied().unwrap_or(1).max(1)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub in_flight: usize,
    pub queued: usize,
    pub weight: u32,
}

/// A tenant's decayed count of admissions, as of admission number `at`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Recent {
    count: f64,
    /// The same on the fast history, as of arrival number `fast_at`.
    fast: f64,
    fast_at: u64,
    at: u64,
    weight: u32,
}

impl Recent {
    /// The count after admission number `now`.
    fn count_at(&self, now: u64) -> f64 {
        self.count * DECAY.powf(now.saturating_sub(self.at) as f64)
    }

    fn fast_now(&self, now: u64) -> f64 {
        self.fast * FAST_DECAY.powf(now.saturating_sub(self.fast_at) as f64)
    }
}

impl Usage {
    fn total(&self) -> usize {
        self.in_flight + self.queued
    }
}

#[derive(Debug)]
pub struct Tenants {
    active: HashMap<Arc<str>, Usage>,
    weights: HashMap<String, u32>,
    total_weight: u64,
    max_tenants: usize,
    overflow: Arc<str>,
    /// Admissions so far, every tenant's (the history's clock).
    admissions: u64,
    /// Every admission's decayed count together (the history's whole), kept as it goes rather
    /// than summed again by each `heavy`, which ranking the queue asks once per entry.
    all_recent: f64,
    /// The same on the fast history.
    all_fast: f64,
    /// Arrivals so far (the fast history's clock).
    arrivals: u64,
    /// The arrival at which a full history was last swept.
    swept_at_arrival: u64,
    history: HashMap<Arc<str>, Recent>,
    /// The weights of the tenants in `history` and of the active tenants not in it (not
    /// admitted yet, say, behind a flood): a share of the admissions is a part of their sum.
    history_weight: u64,
    unrecorded_weight: u64,
}

impl Tenants {
    /// `weights`: the tenants that get more (or less) than one share; a weight of 0 counts as 1.
    pub fn new(max_tenants: usize, weights: HashMap<String, u32>) -> Tenants {
        Tenants {
            active: HashMap::new(),
            weights,
            total_weight: 0,
            max_tenants: max_tenants.max(1),
            overflow: Arc::from(OVERFLOW),
            admissions: 0,
            all_recent: 0.0,
            all_fast: 0.0,
            arrivals: 0,
            swept_at_arrival: 0,
            history: HashMap::new(),
            history_weight: 0,
            unrecorded_weight: 0,
        }
    }

    /// The key a request of `tenant` is counted under.
    pub fn key(&self, tenant: &str) -> Arc<str> {
        if let Some((k, _)) = self.active.get_key_value(tenant) {
            return k.clone();
        }
        if self.active.len() >= self.max_tenants {
            return self.overflow.clone();
        }
        Arc::from(tenant)
    }

    pub fn active(&self) -> usize {
        self.active.len()
    }

    fn entry(&mut self, key: &Arc<str>) -> &mut Usage {
        let weights = &self.weights;
        let (total, unrecorded) = (&mut self.total_weight, &mut self.unrecorded_weight);
        let recorded = self.history.contains_key(key);
        self.active.entry(key.clone()).or_insert_with(|| {
            let weight = weight_in(weights, key);
            *total += u64::from(weight);
            if !recorded {
                *unrecorded += u64::from(weight);
            }
            Usage {
                weight,
                ..Usage::default()
            }
        })
    }

    fn tidy(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get(key) {
            if u.total() == 0 {
                self.total_weight -= u64::from(u.weight);
                if !self.history.contains_key(key) {
                    self.unrecorded_weight =
                        self.unrecorded_weight.saturating_sub(u64::from(u.weight));
                }
                self.active.remove(key);
            }
        }
    }

    pub fn queue(&mut self, key: &Arc<str>) {
        self.entry(key).queued += 1;
    }

    pub fn unqueue(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get_mut(key) {
            u.queued = u.queued.saturating_sub(1);
        }
        self.tidy(key);
    }

    /// An admission of `key`'s: one more in flight, and one more in its history.
    pub fn start(&mut self, key: &Arc<str>) {
        let weight = {
            let u = self.entry(key);
            u.in_flight += 1;
            u.weight
        };
        self.admissions += 1;
        self.all_recent = self.all_recent * DECAY + 1.0;
        let now = self.admissions;
        if let Some(r) = self.history.get_mut(key) {
            r.count = r.count_at(now) + 1.0;
            r.at = now;
        } else {
            self.record(key, weight, |r| r.count = 1.0);
        }
        if now.is_multiple_of(SWEEP_EVERY) {
            self.forget(now);
        }
    }

    /// An arrival of `key`'s, admitted or not: the fast history counts what a tenant asks.
    pub fn arrived(&mut self, key: &Arc<str>) {
        self.arrivals += 1;
        self.all_fast = self.all_fast * FAST_DECAY + 1.0;
        let now = self.arrivals;
        if self.history.len() >= self.max_tenants
            && !self.history.contains_key(key)
            && now.saturating_sub(self.swept_at_arrival) >= SWEEP_EVERY
        {
            self.swept_at_arrival = now;
            self.forget(self.admissions);
        }
        if let Some(r) = self.history.get_mut(key) {
            r.fast = r.fast_now(now) + 1.0;
            r.fast_at = now;
        } else {
            let weight = weight_in(&self.weights, key);
            self.record(key, weight, |r| r.fast = 1.0);
        }
    }

    /// A first entry in the history for `key`, when there is room: nothing counted yet as of
    /// now on both clocks, then `first` sets what this call counts. Its weight moves from the
    /// active tenants not in the history (if it is one) to the history's.
    fn record(&mut self, key: &Arc<str>, weight: u32, first: impl FnOnce(&mut Recent)) {
        if self.history.len() >= self.max_tenants {
            return;
        }
        let mut recent = Recent {
            count: 0.0,
            fast: 0.0,
            fast_at: self.arrivals,
            at: self.admissions,
            weight,
        };
        first(&mut recent);
        self.history.insert(key.clone(), recent);
        self.history_weight += u64::from(weight);
        if self.active.contains_key(key) {
            self.unrecorded_weight = self.unrecorded_weight.saturating_sub(u64::from(weight));
        }
    }

    /// Drops the tenants whose part of the recent admissions and of the recent arrivals both
    /// decayed to almost nothing. A tenant that still asks is kept: a flooder shed every time
    /// has no admissions to remember, and would otherwise come back with a clean fast history
    /// after each sweep.
    fn forget(&mut self, now: u64) {
        let (mut gone, mut still_active) = (0, 0);
        let (active, arrivals) = (&self.active, self.arrivals);
        self.history.retain(|key, r| {
            let keep = r.count_at(now) >= FORGOTTEN || r.fast_now(arrivals) >= FORGOTTEN;
            if !keep {
                gone += u64::from(r.weight);
                if active.contains_key(key) {
                    still_active += u64::from(r.weight);
                }
            }
            keep
        });
        self.history_weight = self.history_weight.saturating_sub(gone);
        self.unrecorded_weight += still_active;
    }

    pub fn finish(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get_mut(key) {
            u.in_flight = u.in_flight.saturating_sub(1);
        }
        self.tidy(key);
    }

    pub fn usage(&self, key: &str) -> Usage {
        self.active.get(key).copied().unwrap_or(Usage {
            weight: weight_in(&self.weights, key),
            ..Usage::default()
        })
    }

    /// Whether `key` took more than `HEAVY` times its share (its weight of the weights of the
    /// tenants admitted recently or waiting now) of the recent admissions, or asked more than
    /// `FAST_HEAVY` times it of the last hundred or so arrivals (a flood is seen within tens of
    /// arrivals of its start, not a hundred admissions).
    pub fn heavy(&self, key: &str) -> bool {
        let Some(r) = self.history.get(key) else {
            return false;
        };
        let now = self.admissions;
        let weights = self.history_weight + self.unrecorded_weight;
        let share = f64::from(r.weight) / weights.max(1) as f64;
        let slow = self.all_recent > 0.0 && r.count_at(now) / self.all_recent > HEAVY * share;
        let fast = r.fast_now(self.arrivals);
        slow || (fast >= FAST_FLOOR && fast / self.all_fast.max(1.0) > FAST_HEAVY * share)
    }

    /// How far `key`'s requests (in flight and queued, plus `extra` about to be) are into its
    /// fair share of `limit`: below 1 within the share, above 1 over it.
    pub fn share_used(&self, key: &str, extra: usize, limit: usize) -> f64 {
        let u = self.usage(key);
        let known = self.active.contains_key(key);
        let total = self.total_weight + if known { 0 } else { u64::from(u.weight) };
        let share = limit.max(1) as f64 * f64::from(u.weight) / total.max(1) as f64;
        (u.total() + extra) as f64 / share.max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_go_when_a_tenant_has_nothing_left() {
        let mut t = Tenants::new(10, HashMap::new());
        let a = t.key("a");
        t.queue(&a);
        t.unqueue(&a);
        t.start(&a);
        assert_eq!(t.active(), 1);
        t.finish(&a);
        assert_eq!(t.active(), 0);
        assert_eq!(t.total_weight, 0);
    }

    #[test]
    fn keys_beyond_the_bound_share_one_entry() {
        let mut t = Tenants::new(3, HashMap::new());
        for i in 0..1000 {
            let k = t.key(&format!("attacker-{i}"));
            t.start(&k);
        }
        // Three apart, plus the overflow entry the other 997 share.
        assert_eq!(t.active(), 4);
        assert_eq!(t.usage(OVERFLOW).in_flight, 997);
    }

    #[test]
    fn weights_divide_the_limit() {
        let weights = HashMap::from([("big".to_string(), 3)]);
        let mut t = Tenants::new(10, weights);
        let (big, small) = (t.key("big"), t.key("small"));
        t.start(&big);
        t.start(&small);
        // limit 8: big's share 6, small's 2.
        assert_eq!(t.share_used("big", 0, 8), 1.0 / 6.0);
        assert_eq!(t.share_used("small", 1, 8), 1.0);
        // A newcomer counts its own weight in the total: 8 · 1 / 5.
        assert_eq!(t.share_used("new", 1, 8), 1.0 / 1.6);
    }

    /// `n` arrivals of `name`'s, none admitted.
    fn ask(t: &mut Tenants, name: &str, n: usize) {
        for _ in 0..n {
            let k = t.key(name);
            t.arrived(&k);
        }
    }

    /// Admits `n` rounds of one request per tenant in `round`, each arriving and finishing at
    /// once.
    fn admit_rounds(t: &mut Tenants, n: usize, round: &[&str]) {
        for _ in 0..n {
            for name in round {
                let k = t.key(name);
                t.arrived(&k);
                t.start(&k);
                t.finish(&k);
            }
        }
    }

    #[test]
    fn a_tenant_taking_several_times_its_share_of_admissions_is_heavy() {
        let mut t = Tenants::new(10, HashMap::new());
        let (a, b, flood) = (t.key("a"), t.key("b"), t.key("flood"));
        for k in [&a, &b, &flood] {
            t.queue(k);
        }
        // Even shares over a long run: nobody is heavy.
        admit_rounds(&mut t, 2_000, &["a", "b", "flood"]);
        assert!(!t.heavy("a") && !t.heavy("b") && !t.heavy("flood"));
        // The flooder then takes four admissions to each of the others' one.
        admit_rounds(
            &mut t,
            1_000,
            &["a", "b", "flood", "flood", "flood", "flood"],
        );
        assert!(t.heavy("flood"));
        assert!(!t.heavy("a") && !t.heavy("b"));
        // An unknown or inactive tenant has no history to hold against it.
        assert!(!t.heavy("newcomer"));
    }

    #[test]
    fn a_flood_after_an_even_history_is_heavy_within_tens_of_admissions() {
        let mut t = Tenants::new(30, HashMap::new());
        let names: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        let round: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        for name in &round {
            let k = t.key(name);
            t.queue(&k);
        }
        // A long even history: every tenant took a twentieth.
        admit_rounds(&mut t, 200, &round);
        assert!(round.iter().all(|n| !t.heavy(n)));
        // Then t0 takes two admissions in five (the flood's part among 20): the slow history
        // alone would take about 80 admissions; the fast one calls it heavy within 40.
        let mut flood = vec!["t0", "t0"];
        flood.extend(&round[1..4]);
        admit_rounds(&mut t, 8, &flood);
        assert!(t.heavy("t0"));
        assert!(round[1..].iter().all(|n| !t.heavy(n)));
    }

    #[test]
    fn weights_raise_the_bar_for_heavy() {
        let weights = HashMap::from([("gold".to_string(), 3)]);
        let mut t = Tenants::new(10, weights);
        for name in ["gold", "tin"] {
            let k = t.key(name);
            t.queue(&k);
        }
        // gold takes three of every four admissions: its weighted share.
        admit_rounds(&mut t, 1_000, &["gold", "gold", "gold", "tin"]);
        assert!(!t.heavy("gold") && !t.heavy("tin"));
    }

    #[test]
    fn the_history_outlives_a_tenants_last_request() {
        let mut t = Tenants::new(10, HashMap::new());
        let others: Vec<Arc<str>> = ["a", "b", "c"].iter().map(|n| t.key(n)).collect();
        for k in &others {
            t.queue(k);
        }
        admit_rounds(&mut t, 300, &["flood", "flood", "flood", "a", "b", "c"]);
        assert!(t.heavy("flood"));
        // The flooder has nothing in flight or queued (admit_rounds finishes each request): its
        // entry is gone, its history is not.
        assert_eq!(t.usage("flood").total(), 0);
        let k = t.key("flood");
        t.queue(&k);
        assert!(t.heavy("flood"));
    }

    #[test]
    fn a_tenant_waiting_behind_a_flood_counts_in_the_shares_before_its_first_admission() {
        let mut t = Tenants::new(10, HashMap::new());
        // Alone, the flooder took every admission: that is its whole share, not a flood.
        admit_rounds(&mut t, 500, &["flood"]);
        assert!(!t.heavy("flood"));
        // A second tenant waits, never admitted yet: the flooder's share is now half.
        let k = t.key("newcomer");
        t.queue(&k);
        assert!(t.heavy("flood"));
        assert!(!t.heavy("newcomer"));
        // It gives up: the flooder is alone again.
        t.unqueue(&k);
        assert!(!t.heavy("flood"));
    }

    #[test]
    fn new_keys_asking_once_do_not_keep_a_flooder_out_of_a_full_history() {
        let mut t = Tenants::new(100, HashMap::new());
        // A cardinality attack: each key asks once and is never admitted.
        for i in 0..5_000 {
            ask(&mut t, &format!("attacker-{i}"), 1);
        }
        assert!(t.history.len() <= 100);
        // A flooder that starts now still gets a record, and is seen.
        let others: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        // It asks six times as often as each of the others, and is admitted as often.
        for _ in 0..1_200 {
            ask(&mut t, "flood", 5);
            admit_rounds(&mut t, 1, &others);
            let k = t.key("flood");
            t.start(&k);
            t.finish(&k);
        }
        assert!(t.history.contains_key("flood"));
        assert!(t.heavy("flood"));
    }

    #[test]
    fn a_flooder_shed_every_time_keeps_its_record_through_a_sweep() {
        let mut t = Tenants::new(100, HashMap::new());
        let others: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        // Fifty rounds: each of the others asks once and is admitted, the flooder asks five
        // times and never is. The thousandth admission, the round's last, sweeps the history.
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        for _ in 0..50 {
            ask(&mut t, "flood", 5);
            admit_rounds(&mut t, 1, &others);
        }
        assert_eq!(t.admissions, SWEEP_EVERY);
        assert!(t.history.contains_key("flood"));
        assert!(t.heavy("flood"));
    }

    #[test]
    fn forgotten_tenants_leave_the_history() {
        let mut t = Tenants::new(10, HashMap::new());
        admit_rounds(&mut t, 1, &["once"]);
        admit_rounds(&mut t, 5_000, &["steady"]);
        assert!(!t.history.contains_key("once"));
        assert_eq!(t.history_weight, 1);
        assert!(!t.heavy("steady"));
    }
}
