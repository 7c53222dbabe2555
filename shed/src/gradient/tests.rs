//! The gradient limit replayed on sample sequences: a service of W workers and a service time
//! (the latency a request sees at a given concurrency, as a recorded run shows it), and
//! proptest's arbitrary sequences for the bounds. Time is the samples' own.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

/// A saturated service: `workers` workers, `service(t)` per request; a request admitted at
/// concurrency c waits for the c − workers ahead of it. Returns the limit after each sample.
struct Service {
    workers: usize,
    now: Duration,
}

impl Service {
    fn new(workers: usize) -> Service {
        Service {
            workers,
            now: Duration::ZERO,
        }
    }

    /// Runs for `span` of simulated time with at most `demand` requests wanting in.
    fn run(&mut self, alg: &mut Gradient, span: Duration, service: Duration, demand: usize) {
        let end = self.now + span;
        while self.now < end {
            let in_flight = alg.limit().min(demand).max(1);
            let queued = in_flight as f64 / self.workers as f64;
            let rtt = service.mul_f64(queued.max(1.0));
            // `in_flight` requests complete per rtt.
            self.now += rtt / in_flight as u32;
            alg.on_sample(Sample {
                at: self.now,
                rtt,
                in_flight,
                dropped: false,
            });
        }
    }

    /// Runs on until a probe in progress is over, so the limit read is the controller's own.
    fn settle(&mut self, alg: &mut Gradient, service: Duration) {
        while alg.observed().probing {
            self.run(alg, MS, service, usize::MAX);
        }
    }
}

fn gradient() -> Gradient {
    Gradient::new(Bounds::default(), GradientSettings::default()).unwrap()
}

/// The latency a saturated service shows at the algorithm's limit, over its service time.
fn stretch(alg: &Gradient, workers: usize) -> f64 {
    (alg.limit() as f64 / workers as f64).max(1.0)
}

#[test]
fn starts_at_the_initial_limit_and_settles_just_above_the_workers() {
    let mut alg = gradient();
    // The first window measures the no-load latency at the minimum.
    assert_eq!(alg.limit(), 3);
    assert!(alg.observed().probing);
    let mut svc = Service::new(8);
    svc.run(&mut alg, Duration::from_secs(5), 10 * MS, usize::MAX);
    let limit = alg.limit();
    assert!((8..=16).contains(&limit), "limit {limit}");
    assert!(stretch(&alg, 8) <= 2.0);
    assert_eq!(alg.observed().min_rtt, Some(10 * MS));
}

#[test]
fn grows_from_a_safe_start_to_a_large_service() {
    let mut alg = gradient();
    let mut svc = Service::new(200);
    svc.run(&mut alg, Duration::from_secs(10), 10 * MS, usize::MAX);
    let limit = alg.limit();
    assert!((200..=300).contains(&limit), "limit {limit}");
}

#[test]
fn tracks_a_service_that_slows_down_twice_then_speeds_up() {
    let mut alg = gradient();
    let mut svc = Service::new(8);
    svc.run(&mut alg, Duration::from_secs(3), 10 * MS, usize::MAX);
    // Twice slower: the stale windows trigger a probe well before the 10 s interval.
    svc.run(&mut alg, Duration::from_secs(3), 20 * MS, usize::MAX);
    svc.settle(&mut alg, 20 * MS);
    assert_eq!(alg.observed().min_rtt, Some(20 * MS));
    let limit = alg.limit();
    assert!(
        (8..=16).contains(&limit),
        "limit after the slowdown {limit}"
    );
    // Faster than ever: the minimum follows at once (to within the queue the limit allows, the
    // next probe says 5 ms exactly) and the limit stays at the workers.
    svc.run(&mut alg, Duration::from_secs(1), 5 * MS, usize::MAX);
    let min = alg.observed().min_rtt.unwrap();
    assert!(min < 10 * MS, "{min:?}");
    svc.run(&mut alg, Duration::from_secs(10), 5 * MS, usize::MAX);
    svc.settle(&mut alg, 5 * MS);
    assert_eq!(alg.observed().min_rtt, Some(5 * MS));
    let limit = alg.limit();
    assert!(
        (8..=16).contains(&limit),
        "limit after the speed-up {limit}"
    );
}

#[test]
fn a_slowdown_shrinks_the_limit_within_a_few_windows() {
    let mut alg = gradient();
    let mut svc = Service::new(8);
    svc.run(&mut alg, Duration::from_secs(3), 10 * MS, usize::MAX);
    let before = alg.limit();
    svc.run(&mut alg, Duration::from_millis(300), 20 * MS, usize::MAX);
    assert!(alg.limit() < before, "{} !< {before}", alg.limit());
}

#[test]
fn a_service_never_asked_for_the_whole_limit_does_not_raise_it() {
    let mut alg = gradient();
    let mut svc = Service::new(8);
    svc.run(&mut alg, Duration::from_secs(5), 10 * MS, 3);
    assert_eq!(alg.limit(), 10);
}

#[test]
fn a_latency_target_holds_the_limit_down() {
    let bounds = Bounds {
        latency_target: Some(11 * MS),
        ..Bounds::default()
    };
    let mut alg = Gradient::new(bounds, GradientSettings::default()).unwrap();
    let mut svc = Service::new(8);
    svc.run(&mut alg, Duration::from_secs(5), 10 * MS, usize::MAX);
    let free = {
        let mut alg = gradient();
        svc.run(&mut alg, Duration::from_secs(5), 10 * MS, usize::MAX);
        alg.limit()
    };
    assert!(alg.limit() <= free, "{} > {free}", alg.limit());
}

#[test]
fn dropped_answers_cut_the_limit() {
    let mut alg = gradient();
    let mut svc = Service::new(64);
    svc.run(&mut alg, Duration::from_secs(3), 10 * MS, usize::MAX);
    let before = alg.limit();
    let mut at = svc.now;
    for _ in 0..100 {
        at += MS;
        alg.on_sample(Sample {
            at,
            rtt: 10 * MS,
            in_flight: before,
            dropped: true,
        });
    }
    assert!(alg.limit() < before, "{} !< {before}", alg.limit());
}

/// A recorded run (8 workers at 10 ms, the limit at 16: the mean is 20 ms, twice the minimum
/// from the first, light window): the limit comes down window by window.
#[test]
fn a_recorded_sequence_brings_the_limit_down() {
    let mut alg = gradient();
    let light = (1..=10).map(|i| (i * 10, 10, 2));
    let loaded = (11..=70).map(|i| (i * 10, 20, 16));
    let mut limits = Vec::new();
    for (at, rtt, in_flight) in light.chain(loaded) {
        alg.on_sample(Sample {
            at: at * MS,
            rtt: rtt * MS,
            in_flight,
            dropped: false,
        });
        limits.push(alg.limit());
    }
    assert_eq!(alg.observed().min_rtt, Some(10 * MS));
    let after_probe = &limits[10..];
    assert!(after_probe.windows(2).all(|w| w[1] <= w[0]), "{limits:?}");
    assert!(*limits.last().unwrap() < 10);
}

/// A probe on a saturated service runs below its workers (no request waits for one, so the
/// latency measured is the no-load one) but above `min_limit`, and gives the limit back after.
#[test]
fn a_probe_measures_below_the_workers_and_restores_the_limit() {
    let settings = GradientSettings {
        probe_interval: Duration::from_secs(1),
        ..GradientSettings::default()
    };
    let mut alg = Gradient::new(Bounds::default(), settings).unwrap();
    let mut svc = Service::new(8);
    let mut saw_probe = false;
    svc.run(&mut alg, 100 * MS, 10 * MS, usize::MAX);
    assert!(!alg.observed().probing);
    for _ in 0..2000 {
        svc.run(&mut alg, MS, 10 * MS, usize::MAX);
        saw_probe |= alg.observed().probing;
        if alg.observed().probing {
            let level = alg.limit();
            assert!((4..=8).contains(&level), "probe at {level}");
        }
    }
    assert!(saw_probe);
    assert_eq!(alg.observed().min_rtt, Some(10 * MS));
    assert!(alg.limit() >= 8);
}

#[test]
fn contradictory_bounds_are_refused_by_name() {
    let bad = Bounds {
        min_limit: 50,
        max_limit: 10,
        ..Bounds::default()
    };
    let err = Gradient::new(bad, GradientSettings::default()).unwrap_err();
    assert!(err.contains("min_limit"), "{err}");
    let bad = Bounds {
        initial_limit: 2000,
        ..Bounds::default()
    };
    assert!(Gradient::new(bad, GradientSettings::default())
        .unwrap_err()
        .contains("initial_limit"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the samples, the limit stays within the bounds and at least 1, and so do the
    /// limit outside a probe and the limit with a critical request's overdraft.
    #[test]
    fn the_limit_stays_within_the_bounds(
        min in 1usize..20,
        span in 0usize..200,
        samples in prop::collection::vec((0u64..5_000, 0u64..2_000_000, 0usize..500, any::<bool>()), 0..400),
    ) {
        let bounds = Bounds { min_limit: min, max_limit: min + span, initial_limit: min, latency_target: None };
        let mut alg = Gradient::new(bounds, GradientSettings::default()).unwrap();
        let mut at = Duration::ZERO;
        for (gap, rtt, in_flight, dropped) in samples {
            at += Duration::from_micros(gap);
            alg.on_sample(Sample { at, rtt: Duration::from_micros(rtt), in_flight, dropped });
            let limit = alg.limit();
            prop_assert!(limit >= min && limit <= min + span, "limit {limit}");
            let steady = alg.steady_limit();
            prop_assert!(steady >= min && steady <= min + span, "steady limit {steady}");
            let with_overdraft = limit + alg.critical_overdraft();
            prop_assert!(with_overdraft <= min + span, "limit with overdraft {with_overdraft}");
        }
    }

    /// A saturated service of any size and speed: the limit ends between its workers and twice
    /// them (latency at most twice the service time), after a run long enough to grow.
    #[test]
    fn a_saturated_service_gets_between_its_workers_and_twice(
        workers in 3usize..100,
        service_ms in 1u64..50,
    ) {
        let mut alg = gradient();
        let mut svc = Service::new(workers);
        let span = Duration::from_millis(service_ms * 600).max(Duration::from_secs(5));
        svc.run(&mut alg, span, Duration::from_millis(service_ms), usize::MAX);
        svc.settle(&mut alg, Duration::from_millis(service_ms));
        let limit = alg.limit();
        prop_assert!(limit >= workers && limit <= 2 * workers.max(5), "workers {workers} limit {limit}");
    }
}
