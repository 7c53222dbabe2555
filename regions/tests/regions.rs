//! The budget controller against three real regions (issue 30, docs/regions.md): three
//! redis-servers on loopback, the controller's links through TCP proxies that add latency, drop
//! connections and partition, gateways in each region that call only their own store. Demand
//! moves: all in A, then all in B, then even, then a flash crowd in C. Every test runs on each
//! backend (`on_every_backend!`): the module, on its debug clock, and the Functions library
//! alone, by FCALL and by EVALSHA, on a wall clock the test sets. Time is stepped by the test;
//! every assertion is on counts and invariants.

mod world;

use ratelimit_client::Backend;
use ratelimit_regions::Controller;
use world::*;

on_every_backend!(
    shares_follow_demand_and_never_sum_above_l,
    partitions_drops_and_a_controller_restart_stay_safe_and_every_region_decides,
    a_store_that_loses_a_key_is_over_l_by_its_safe_share_for_at_most_one_period,
    with_the_floor_at_the_safe_share_a_lost_key_never_puts_the_sum_above_l,
);

const STEPS_PER_PERIOD: usize = (PERIOD_MS / STEP_MS) as usize;
const STEPS_PER_WINDOW: usize = (W_MS / STEP_MS) as usize;
const PERIODS_PER_PHASE: usize = 6;

/// Requests per step (50 ms) in each region: 60 a step is 1,200 a second, 1.2 L.
const PHASES: [(&str, [u64; 3]); 4] = [
    ("all in A", [60, 0, 0]),
    ("all in B", [0, 60, 0]),
    ("even", [20, 20, 20]),
    ("flash crowd in C", [6, 6, 80]),
];

/// What a run saw, step by step, and what the controller reported each period.
struct Run {
    seen: Vec<Seen>,
    demand: Vec<[u64; 3]>,
    reports: Vec<Option<ratelimit_regions::Report>>,
}

/// Runs the phases; before each period, `faults(period, world, controller)` may partition,
/// delay, kill or restart; then the controller (if any) runs its period.
fn run(
    world: &mut World,
    controller: &mut Option<Controller>,
    mut faults: impl FnMut(usize, &mut World, &mut Option<Controller>),
) -> Run {
    let mut out = Run {
        seen: Vec::new(),
        demand: Vec::new(),
        reports: Vec::new(),
    };
    let mut period = 0;
    for (_, demand) in PHASES {
        for _ in 0..PERIODS_PER_PHASE {
            faults(period, world, controller);
            let now = world.now_ms();
            out.reports.push(controller.as_mut().map(|c| c.period(now)));
            for _ in 0..STEPS_PER_PERIOD {
                out.seen.push(world.step(&demand));
                out.demand.push(demand);
            }
            period += 1;
        }
    }
    out
}

/// The bound on admissions summed over the regions in any window W: L plus the burst B, plus B
/// for a share that rose in the window (the raised region's burst is fresh; the lowered one's
/// spend carries). With W shorter than a period, at most one rise per window.
const WINDOW_BOUND: u64 = L + 2 * B;

fn assert_safe(run: &Run) {
    for (i, seen) in run.seen.iter().enumerate() {
        let sum: u64 = seen.limit.iter().sum();
        assert!(
            sum <= L,
            "step {i}: shares in force {:?} sum above L",
            seen.limit
        );
    }
    let per_step: Vec<u64> = run.seen.iter().map(|s| s.admitted.iter().sum()).collect();
    for (i, window) in per_step.windows(STEPS_PER_WINDOW).enumerate() {
        let sum: u64 = window.iter().sum();
        assert!(sum <= WINDOW_BOUND, "window from step {i}: {sum} admitted");
    }
}

/// Admitted in each period, summed over the regions.
fn per_period(run: &Run) -> Vec<u64> {
    run.seen
        .chunks(STEPS_PER_PERIOD)
        .map(|p| p.iter().map(|s| s.admitted.iter().sum::<u64>()).sum())
        .collect()
}

fn shares_follow_demand_and_never_sum_above_l(backend: Backend) {
    let mut world = World::on(backend, 20);
    let mut controller = Some(world.controller());
    let run = run(&mut world, &mut controller, |_, _, _| {});
    assert_safe(&run);
    // From the third period after each shift on, at least 98 % of L (demand is 1.2 L or more).
    let full = L * PERIOD_MS / W_MS;
    for (i, admitted) in per_period(&run).into_iter().enumerate() {
        if i % PERIODS_PER_PHASE >= 3 {
            assert!(
                admitted * 100 >= full * 98,
                "period {i} ({}): {admitted} of {full}",
                PHASES[i / PERIODS_PER_PHASE].0
            );
        }
    }
    // No gateway call left its region: each store saw exactly its own gateways' calls.
    if let Some(calls) = world.gcra_calls() {
        assert_eq!(calls, world.calls);
    }
}

fn partitions_drops_and_a_controller_restart_stay_safe_and_every_region_decides(backend: Backend) {
    let mut world = World::on(backend, 20);
    let mut controller = Some(world.controller());
    let run = run(&mut world, &mut controller, |period, world, controller| {
        match period {
            // C cut off from the controller while demand moves to B (its share expires, it
            // falls back to its safe share, B never gets what C might still use).
            7 => world.proxies[2].partition(true),
            12 => world.proxies[2].partition(false),
            // Every link drops connections; then B is cut off for a period (writes it may have
            // received are never confirmed).
            15 => world.proxies.iter().for_each(|p| p.drops(30)),
            17 => {
                world.proxies.iter().for_each(|p| p.drops(0));
                world.proxies[1].partition(true);
            }
            18 => world.proxies[1].partition(false),
            // The controller dies in the flash crowd; a new one starts a period later while C
            // (holding most of L) is cut off: it must not hand A and B what C may still use.
            20 => *controller = None,
            21 => {
                world.proxies[2].partition(true);
                *controller = Some(world.controller());
            }
            _ => {}
        }
    });
    assert_safe(&run);
    // Every region with demand keeps deciding locally, controller or not.
    for (i, period) in run.seen.chunks(STEPS_PER_PERIOD).enumerate() {
        let demand = run.demand[i * STEPS_PER_PERIOD];
        for (r, asked) in demand.iter().enumerate() {
            let admitted: u64 = period.iter().map(|s| s.admitted[r]).sum();
            assert!(
                *asked == 0 || admitted > 0,
                "period {i}: region {r} admitted nothing"
            );
        }
    }
    let unreachable: usize = run
        .reports
        .iter()
        .flatten()
        .filter(|r| r.unreachable.iter().any(|n| n == "c"))
        .count();
    assert!(
        unreachable >= 4,
        "C was reported unreachable {unreachable} times"
    );
    if let Some(calls) = world.gcra_calls() {
        assert_eq!(calls, world.calls);
    }
}

/// B's store loses the key a step into the fourth period (a flush, a failover to a replica
/// without it); its gateways then call it under their safe share. Answers B's share before the
/// loss and, per step, the period and the shares in force.
fn lose_a_key(world: &mut World) -> (u64, Vec<(usize, u64)>) {
    let mut controller = world.controller();
    let demand = [60, 2, 0];
    let mut sums = Vec::new();
    let mut held_by_b = 0;
    for period in 0..6 {
        let report = controller.period(world.now_ms());
        assert!(report.unreachable.is_empty(), "{:?}", report.causes);
        for step in 0..STEPS_PER_PERIOD {
            if period == 3 && step == 1 {
                let _: i64 = redis::cmd("DEL")
                    .arg(KEY)
                    .query(&mut world.looks[1])
                    .unwrap();
            }
            let seen = world.step(&demand);
            if period == 2 {
                held_by_b = seen.limit[1];
            }
            sums.push((period, seen.limit.iter().sum::<u64>()));
        }
    }
    (held_by_b, sums)
}

/// docs/regions.md, "A store that loses a key": with the defaults (floor 5 below the safe
/// share 333) the region decides under its safe share until the controller's next period writes
/// its share again, so for at most that period the shares in force sum above L, by at most its
/// safe share less what it held; then they fit again.
fn a_store_that_loses_a_key_is_over_l_by_its_safe_share_for_at_most_one_period(backend: Backend) {
    let mut world = World::on(backend, 0);
    let (held_by_b, sums) = lose_a_key(&mut world);
    let over: Vec<_> = sums.iter().filter(|s| s.1 > L).collect();
    let worst = over.iter().map(|s| s.1).max().unwrap_or(L);
    println!(
        "B held {held_by_b}; {} steps of {STEP_MS} ms over L, at most {worst} against L = {L}",
        over.len()
    );
    assert!(!over.is_empty(), "losing the key put nothing over L");
    assert!(worst <= L + SAFE - held_by_b, "{worst}");
    // Only in the period of the loss: the next period's read sees it and writes B's share back
    // (a lower, first).
    assert!(over.iter().all(|s| s.0 == 3), "{over:?}");
    assert!(over.len() < STEPS_PER_PERIOD);
}

/// With `floor` at or above `safe`, no share is ever written below the safe share, so a key a
/// store loses falls back to no more than it held: the shares in force never sum above L.
fn with_the_floor_at_the_safe_share_a_lost_key_never_puts_the_sum_above_l(backend: Backend) {
    let mut world = World::on(backend, 0);
    (world.safe, world.safe_burst, world.floor) = (100, 10, 100);
    let (held_by_b, sums) = lose_a_key(&mut world);
    assert!(held_by_b >= 100, "{held_by_b}");
    let worst = sums.iter().map(|s| s.1).max().unwrap_or(0);
    assert!(worst <= L, "{worst}");
}
