//! `make bench-shed`: a service of 8 workers × 10 ms (C = 800 req/s; the workers sleep, so the
//! 2 cores are not the bottleneck) under open-loop Poisson load with a tier mix and 20 tenants,
//! behind: nothing, tower's ConcurrencyLimit + LoadShed at the right static limit (8) and at a
//! wrong one (16), this crate's layer, and its sidecar. Per system: load 0.5×, 1×, 2×, 5× C;
//! a tenant flooding at 10× its share; the service slowing 2× under 1× C load, then speeding
//! up again. Prints the tables docs/performance.md holds (also in target/bench-shed.md) and
//! writes docs/shed.svg (goodput and p99 against load). The whole run takes about two minutes.

mod load;
mod plot;
mod report;
mod systems;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use ratelimit_shed::{Completion, Settings, ShedLayer, Shedder, Ticket, Tier};
use tower::{Layer, Service, ServiceExt};

use load::{load, ms, pct, Event, LOADS};
use report::{Flood, Slowdown};
use systems::{headers, System, CAPACITY, SERVICE_MS, WORKERS};

const TENANTS: usize = 20;
const PHASE: Duration = Duration::from_secs(2);

/// The cost of a rejection, without HTTP: the shedder's `acquire` when full, and the layer's
/// whole call (classify, acquire, build the 503).
async fn rejection_cost() -> (f64, f64) {
    let settings = Settings {
        bounds: ratelimit_shed::Bounds {
            min_limit: 1,
            max_limit: 1,
            initial_limit: 1,
            latency_target: None,
        },
        queue: ratelimit_shed::QueueSettings {
            max_queue: Some(0),
            ..Default::default()
        },
        ..Settings::default()
    };
    let shedder = Shedder::new(settings).unwrap();
    let ticket = Ticket {
        tier: Tier::Default,
        tenant: "t".into(),
    };
    // The initial probe admits min_limit = 1: hold it.
    let held = shedder.acquire(&ticket).await.unwrap();
    const N: u32 = 100_000;
    let t = Instant::now();
    for _ in 0..N {
        assert!(shedder.acquire(&ticket).await.is_err());
    }
    let core = t.elapsed().as_secs_f64() * 1e6 / f64::from(N);
    let mut svc = ShedLayer::new(shedder.clone(), headers()).layer(tower::service_fn(
        |_req: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) },
    ));
    let t = Instant::now();
    for _ in 0..N {
        let req = Request::get("/")
            .header("x-tenant", "t")
            .body(String::new())
            .unwrap();
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let layer = t.elapsed().as_secs_f64() * 1e6 / f64::from(N);
    held.finish(Completion::Answered);
    (core, layer)
}

/// The p99 of a bare service at 0.1 C with the service time given.
async fn unloaded_p99(service_us: u64) -> Duration {
    let bare = System::Bare.start().await;
    bare.work.service_us.store(service_us, Ordering::Relaxed);
    let out = load(bare.addr, &[0.1 * CAPACITY], PHASE, 7, Vec::new()).await;
    pct(out.iter().map(|o| o.latency).collect(), 0.99).unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let systems = [
        System::Bare,
        System::Static(WORKERS),
        System::Static(2 * WORKERS),
        System::Layer,
        System::Sidecar,
    ];
    let unloaded = unloaded_p99(SERVICE_MS * 1000).await;
    let unloaded_slow = unloaded_p99(2 * SERVICE_MS * 1000).await;
    let good_within = unloaded * 2;
    println!(
        "unloaded p99 {} ms ({} ms at 2× the service time); goodput counts successes within {} ms",
        ms(Some(unloaded)),
        ms(Some(unloaded_slow)),
        ms(Some(good_within))
    );

    let (mut rows, mut floods, mut slows) = (Vec::new(), Vec::new(), Vec::new());
    for sys in systems {
        let name = sys.name();
        let started = sys.start().await;
        let (addr, work) = (started.addr, started.work.clone());
        let limit_now = || started.limits.as_ref().map_or("–".into(), |l| l.take());
        for (i, l) in LOADS.iter().enumerate() {
            let rates = vec![l * CAPACITY / TENANTS as f64; TENANTS];
            limit_now();
            let out = load(addr, &rates, PHASE, 11 + i as u64, Vec::new()).await;
            let mut row = report::summarize(*l, &out, good_within, PHASE);
            row.system = name.clone();
            row.held = work.take_hold();
            row.limit = limit_now();
            println!(
                "{name} at {l}×C: goodput {:.2} C, p99 {} ms, worker held {} ms, limit {}",
                row.goodput,
                ms(row.p99_ok),
                ms(row.held),
                row.limit
            );
            rows.push(row);
        }
        // 19 tenants at 0.8 C together, tenant 0 at 10× a share (0.5 C).
        let mut rates = vec![0.8 * CAPACITY / (TENANTS - 1) as f64; TENANTS];
        rates[0] = 10.0 * CAPACITY / TENANTS as f64;
        limit_now();
        let out = load(addr, &rates, PHASE, 97, Vec::new()).await;
        // Max-min fairness against what the workers really delivered.
        let delivered = work
            .take_hold()
            .map_or(CAPACITY, |h| WORKERS as f64 / h.as_secs_f64());
        let f: Flood = report::flood(&out, &rates, PHASE, delivered);
        println!(
            "{name} flood: well-behaved {:.1} % (worst {:.1} %), flooder {:.2} of its share, limit {}",
            f.polite_ok * 100.0,
            f.worst_polite * 100.0,
            f.flooder_over_share,
            limit_now()
        );
        println!("{name} flood: {}", report::losses(&out));
        floods.push(f);
        // 1× C for 6 s: the service slows 2× at 2 s and is back to normal at 4 s.
        let (slow_at, fast_at, end) = (PHASE, 2 * PHASE, 3 * PHASE);
        let slow_limit = Arc::new(Mutex::new(String::new()));
        let (knob, knob2) = (work.service_us.clone(), work.service_us.clone());
        let events: Vec<Event> = vec![
            (
                slow_at,
                Box::new(move || knob.store(2 * SERVICE_MS * 1000, Ordering::Relaxed)),
            ),
            (
                fast_at,
                Box::new(move || knob2.store(SERVICE_MS * 1000, Ordering::Relaxed)),
            ),
        ];
        let rates = vec![CAPACITY / TENANTS as f64; TENANTS];
        let out = {
            let run = load(addr, &rates, end, 131, events);
            tokio::pin!(run);
            // Where the limit was while the service was slow: read when it speeds up.
            let mut read_at =
                tokio::time::interval_at(tokio::time::Instant::now() + slow_at, fast_at - slow_at);
            let mut reads = 0;
            loop {
                tokio::select! {
                    out = &mut run => break out,
                    _ = read_at.tick(), if reads < 2 => {
                        let l = limit_now();
                        if reads == 1 {
                            *slow_limit.lock().unwrap() = l;
                        }
                        reads += 1;
                    }
                }
            }
        };
        let s = Slowdown {
            back_slow: report::settled_within(&out, slow_at, fast_at, unloaded_slow * 2),
            back_normal: report::settled_within(&out, slow_at, fast_at, good_within),
            back_fast: report::settled_within(&out, fast_at, end, good_within),
            served_fast: report::served(&out, end - Duration::from_secs(1), end),
            limit: format!("{} → {}", slow_limit.lock().unwrap(), limit_now()),
        };
        println!(
            "{name} slowdown: p99 back within 2× slow unloaded after {:?} (normal {:?}); after the speed-up {:?}, served {:.2} C; limit {}",
            s.back_slow, s.back_normal, s.back_fast, s.served_fast, s.limit
        );
        slows.push(s);
    }
    let (core, layer) = rejection_cost().await;

    let names: Vec<String> = systems.iter().map(|s| s.name()).collect();
    let mut md = format!(
        "Unloaded p99 {} ms ({} ms with the service 2× slower); goodput = successes within 2× that ({} ms) per second, as a fraction of C = {CAPACITY:.0} req/s. p50/p99 in ms of successful requests.\n\n",
        ms(Some(unloaded)),
        ms(Some(unloaded_slow)),
        ms(Some(good_within))
    );
    md += &report::rows_table(&rows);
    md += "\n";
    md += &report::phases_table(&names, &floods, &slows);
    md += &format!("\nA rejection costs {core:.2} µs in the shedder and {layer:.2} µs through the layer (no HTTP).\n");
    println!("\n{md}");
    let _ = std::fs::write("docs/shed.svg", plot::svg(&rows, &names));
    let _ = std::fs::write("target/bench-shed.md", md);
}
