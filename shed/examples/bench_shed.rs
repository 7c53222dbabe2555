//! `make bench-shed`: a service of 8 workers × 10 ms (C = 800 req/s; the workers sleep, so the
//! 2 cores are not the bottleneck) under open-loop Poisson load with a tier mix and 20 tenants,
//! behind: nothing, tower's ConcurrencyLimit + LoadShed at the right static limit (8) and at a
//! wrong one (16), this crate's layer, and its sidecar. Per system: load 0.5×, 1×, 2×, 5× C;
//! a tenant flooding at 10× its share; the service slowing 2× under 1× C load. Prints the
//! table docs/performance.md holds and writes docs/shed.svg (goodput and p99 against load).
//! The whole run takes about two minutes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use ratelimit_shed::proxy::{self, Sidecar};
use ratelimit_shed::{ByHeaders, Completion, Settings, ShedLayer, Shedder, Ticket, Tier};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const WORKERS: usize = 8;
const SERVICE_MS: u64 = 10;
const CAPACITY: f64 = WORKERS as f64 * 1000.0 / SERVICE_MS as f64;
const TENANTS: usize = 20;
const PHASE: Duration = Duration::from_secs(2);
const SLOW_PHASE: Duration = Duration::from_secs(4);
const TIMEOUT: Duration = Duration::from_secs(1);
const LOADS: [f64; 4] = [0.5, 1.0, 2.0, 5.0];

/// The service: a worker each, then the service time (which the slowdown phase doubles).
#[derive(Clone)]
struct Work {
    workers: Arc<Semaphore>,
    service_us: Arc<AtomicU64>,
}

impl Work {
    fn new() -> Work {
        Work {
            workers: Arc::new(Semaphore::new(WORKERS)),
            service_us: Arc::new(AtomicU64::new(SERVICE_MS * 1000)),
        }
    }
    async fn serve(&self) -> Response<String> {
        let _w = self.workers.acquire().await;
        let us = self.service_us.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_micros(us)).await;
        Response::new(String::new())
    }
}

type BoxSvc = tower::util::BoxCloneService<Request<Incoming>, Response<String>, Infallible>;

async fn serve(svc: BoxSvc) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let svc = svc.clone();
            tokio::spawn(async move {
                let s = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), s)
                    .await;
            });
        }
    });
    addr
}

fn work_service(work: &Work) -> BoxSvc {
    let work = work.clone();
    BoxSvc::new(tower::service_fn(move |_req: Request<Incoming>| {
        let work = work.clone();
        async move { Ok::<_, Infallible>(work.serve().await) }
    }))
}

fn headers() -> ByHeaders {
    ByHeaders::new(
        Some(http::HeaderName::from_static("x-priority")),
        Some(http::HeaderName::from_static("x-tenant")),
    )
}

/// The systems compared, each built over the same kind of service.
#[derive(Clone, Copy, PartialEq)]
enum System {
    Bare,
    Static(usize),
    Layer,
    Sidecar,
}

impl System {
    fn name(self) -> String {
        match self {
            System::Bare => "no shedder".into(),
            System::Static(n) => format!("tower ConcurrencyLimit({n}) + LoadShed"),
            System::Layer => "ShedLayer".into(),
            System::Sidecar => "sidecar".into(),
        }
    }

    /// Starts the system; returns the address to load and the service's knob.
    async fn start(self) -> (SocketAddr, Work) {
        let work = Work::new();
        let addr = match self {
            System::Bare => serve(work_service(&work)).await,
            System::Static(n) => {
                let inner = ServiceBuilder::new()
                    .load_shed()
                    .concurrency_limit(n)
                    .service(work_service(&work));
                let svc = tower::service_fn(move |req: Request<Incoming>| {
                    let inner = inner.clone();
                    async move {
                        Ok::<_, Infallible>(match inner.oneshot(req).await {
                            Ok(r) => r,
                            Err(_) => {
                                let mut r = Response::new(String::new());
                                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                                r
                            }
                        })
                    }
                });
                serve(BoxSvc::new(svc)).await
            }
            System::Layer => {
                let shedder = Shedder::new(Settings::default()).unwrap();
                let svc = ShedLayer::new(shedder, headers()).layer(work_service(&work));
                serve(BoxSvc::new(svc)).await
            }
            System::Sidecar => {
                let upstream = serve(work_service(&work)).await;
                let shedder = Shedder::new(Settings::default()).unwrap();
                let uri = format!("http://{upstream}").parse().unwrap();
                let sidecar = Sidecar::new(shedder, headers(), &uri, false, None).unwrap();
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                tokio::spawn(proxy::serve(listener, Arc::new(sidecar), false));
                addr
            }
        };
        (addr, work)
    }
}

/// One request's outcome.
#[derive(Clone, Copy)]
struct Outcome {
    at: Duration,
    latency: Duration,
    ok: bool,
    tier: Tier,
    tenant: usize,
}

/// A small xorshift: the load is the same for every system.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn tier_of(x: f64) -> Tier {
    match x {
        x if x < 0.1 => Tier::Critical,
        x if x < 0.7 => Tier::Default,
        x if x < 0.9 => Tier::Sheddable,
        _ => Tier::Batch,
    }
}

/// Open-loop Poisson load: `rates[t]` req/s for tenant t, for `span`; `at_half` runs halfway.
async fn load(
    addr: SocketAddr,
    rates: &[f64],
    span: Duration,
    seed: u64,
    at_half: Option<Box<dyn FnOnce() + Send>>,
) -> Vec<Outcome> {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4096)
        .build_http();
    let total: f64 = rates.iter().sum();
    let mut rng = Rng(seed | 1);
    let mut arrivals = Vec::new();
    let mut t = 0.0;
    loop {
        t += -(1.0 - rng.next()).ln() / total;
        if t >= span.as_secs_f64() {
            break;
        }
        let mut pick = rng.next() * total;
        let mut tenant = 0;
        for (i, r) in rates.iter().enumerate() {
            tenant = i;
            if pick < *r {
                break;
            }
            pick -= r;
        }
        arrivals.push((Duration::from_secs_f64(t), tenant, tier_of(rng.next())));
    }
    let start = tokio::time::Instant::now();
    let mut at_half = at_half;
    let mut handles = Vec::with_capacity(arrivals.len());
    for (at, tenant, tier) in arrivals {
        if at_half.is_some() && at >= span / 2 {
            if let Some(f) = at_half.take() {
                f();
            }
        }
        tokio::time::sleep_until(start + at).await;
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            let req = Request::get(format!("http://{addr}/"))
                .header("x-priority", tier.name())
                .header("x-tenant", format!("tenant-{tenant}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let ok = match tokio::time::timeout(TIMEOUT, client.request(req)).await {
                Ok(Ok(resp)) => {
                    let ok = resp.status() == StatusCode::OK;
                    let _ = resp.into_body().collect().await;
                    ok
                }
                _ => false,
            };
            // Latency from the planned arrival: open loop, no coordinated omission.
            let latency = start.elapsed().saturating_sub(at);
            Outcome {
                at,
                latency,
                ok,
                tier,
                tenant,
            }
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(o) = h.await {
            out.push(o);
        }
    }
    out
}

fn pct(mut v: Vec<Duration>, p: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v.get(i).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

struct Row {
    system: String,
    load: f64,
    goodput: f64,
    p99_ok: Option<Duration>,
    tiers: Vec<(Option<Duration>, Option<Duration>, f64)>,
}

fn summarize(
    system: &str,
    load: f64,
    out: &[Outcome],
    good_within: Duration,
    span: Duration,
) -> Row {
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
        system: system.into(),
        load,
        goodput: good as f64 / span.as_secs_f64() / CAPACITY,
        p99_ok: pct(
            out.iter().filter(|o| o.ok).map(|o| o.latency).collect(),
            0.99,
        ),
        tiers,
    }
}

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

/// A plot's title, its top value and what it shows of a row.
type Panel = (&'static str, f64, Box<dyn Fn(&Row) -> Option<f64>>);

fn svg(rows: &[Row], systems: &[String]) -> String {
    let colors = ["#d62728", "#7f7f7f", "#ff7f0e", "#1f77b4", "#2ca02c"];
    let (w, h, pad) = (360.0, 240.0, 45.0);
    let x = |load: f64| pad + (load.log2() + 1.0) / (5f64.log2() + 1.0) * (w - 2.0 * pad);
    let mut s = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="760" height="300" font-family="sans-serif" font-size="11">"#,
    );
    let panels: [Panel; 2] = [
        (
            "goodput (fraction of C)",
            1.2,
            Box::new(|r: &Row| Some(r.goodput)),
        ),
        (
            "p99 of successes (ms, log)",
            3.0,
            Box::new(|r: &Row| r.p99_ok.map(|d| (d.as_secs_f64() * 1e3).max(1.0).log10())),
        ),
    ];
    for (p, (title, top, value)) in panels.iter().enumerate() {
        let ox = p as f64 * 380.0;
        let y = |v: f64| h - pad + 20.0 - v / top * (h - 2.0 * pad);
        s += &format!(
            r#"<g transform="translate({ox},0)"><text x="{}" y="15">{title}</text>"#,
            pad
        );
        s += &format!(
            r#"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
            y(0.0),
            w - pad,
            y(0.0)
        );
        s += &format!(
            r#"<line x1="{pad}" y1="{}" x2="{pad}" y2="{}" stroke="black"/>"#,
            y(0.0),
            y(*top)
        );
        for load in LOADS {
            s += &format!(
                r#"<text x="{}" y="{}" text-anchor="middle">{load}×C</text>"#,
                x(load),
                y(0.0) + 14.0
            );
        }
        for t in 0..=4 {
            let v = top * f64::from(t) / 4.0;
            let label = if p == 0 {
                format!("{v:.1}")
            } else {
                format!("{:.0}", 10f64.powf(v))
            };
            s += &format!(
                r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#,
                pad - 4.0,
                y(v) + 4.0
            );
        }
        for (i, sys) in systems.iter().enumerate() {
            let pts: Vec<String> = rows
                .iter()
                .filter(|r| &r.system == sys)
                .filter_map(|r| value(r).map(|v| format!("{:.1},{:.1}", x(r.load), y(v.min(*top)))))
                .collect();
            let c = colors.get(i).copied().unwrap_or("black");
            s += &format!(
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            if p == 1 {
                s += &format!(
                    r#"<text x="{}" y="{}" fill="{c}">{sys}</text>"#,
                    pad + 5.0,
                    30.0 + 12.0 * i as f64
                );
            }
        }
        s += "</g>";
    }
    s + "</svg>\n"
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
    // Unloaded: 0.1 C straight to the service.
    let (addr, _) = System::Bare.start().await;
    let unloaded = load(addr, &[0.1 * CAPACITY], PHASE, 7, None).await;
    let unloaded_p99 = pct(unloaded.iter().map(|o| o.latency).collect(), 0.99).unwrap_or_default();
    let good_within = unloaded_p99 * 2;
    println!(
        "unloaded p99 {} ms; goodput counts successes within {} ms",
        ms(Some(unloaded_p99)),
        ms(Some(good_within))
    );

    let mut rows = Vec::new();
    let mut fair = Vec::new();
    let mut recovery = Vec::new();
    for sys in systems {
        let name = sys.name();
        let (addr, work) = sys.start().await;
        for (i, l) in LOADS.iter().enumerate() {
            let rates = vec![l * CAPACITY / TENANTS as f64; TENANTS];
            let out = load(addr, &rates, PHASE, 11 + i as u64, None).await;
            let row = summarize(&name, *l, &out, good_within, PHASE);
            println!(
                "{name} at {l}×C: goodput {:.2} C, p99 {} ms",
                row.goodput,
                ms(row.p99_ok)
            );
            rows.push(row);
        }
        // 19 tenants at 0.8 C together, tenant 0 at 10× a share (0.5 C).
        let mut rates = vec![0.8 * CAPACITY / (TENANTS - 1) as f64; TENANTS];
        rates[0] = 10.0 * CAPACITY / TENANTS as f64;
        let out = load(addr, &rates, PHASE, 97, None).await;
        let polite: Vec<&Outcome> = out.iter().filter(|o| o.tenant != 0).collect();
        let polite_ok = polite.iter().filter(|o| o.ok).count() as f64 / polite.len().max(1) as f64;
        let worst_polite = (1..TENANTS)
            .map(|t| {
                let of: Vec<&&Outcome> = polite.iter().filter(|o| o.tenant == t).collect();
                of.iter().filter(|o| o.ok).count() as f64 / of.len().max(1) as f64
            })
            .fold(1.0, f64::min);
        let flooder_ok =
            out.iter().filter(|o| o.tenant == 0 && o.ok).count() as f64 / PHASE.as_secs_f64();
        let polite_served = polite.iter().filter(|o| o.ok).count() as f64 / PHASE.as_secs_f64();
        // Max-min fair share: what the others leave of C.
        let fair_share = (CAPACITY - polite_served).max(CAPACITY / TENANTS as f64);
        fair.push((
            name.clone(),
            polite_ok,
            worst_polite,
            flooder_ok / fair_share,
        ));
        // The service slows 2× halfway through a 1× C load.
        let knob = work.service_us.clone();
        let rates = vec![CAPACITY / TENANTS as f64; TENANTS];
        let out = load(
            addr,
            &rates,
            SLOW_PHASE,
            131,
            Some(Box::new(move || {
                knob.store(2 * SERVICE_MS * 1000, Ordering::Relaxed)
            })),
        )
        .await;
        let half = SLOW_PHASE / 2;
        let bucket = Duration::from_millis(100);
        let mut p99s: HashMap<u64, Vec<Duration>> = HashMap::new();
        for o in out.iter().filter(|o| o.ok && o.at >= half) {
            let b = ((o.at - half).as_millis() / bucket.as_millis()) as u64;
            p99s.entry(b).or_default().push(o.latency);
        }
        let n = (half.as_millis() / bucket.as_millis()) as u64;
        // The first bucket from which every later one has its p99 within 2× unloaded.
        let back = (0..n)
            .find(|b| {
                (*b..n).all(|k| {
                    p99s.get(&k)
                        .and_then(|v| pct(v.clone(), 0.99))
                        .is_none_or(|p| p <= good_within)
                })
            })
            .map(|b| bucket * b as u32);
        recovery.push((name.clone(), back));
    }
    let (core, layer) = rejection_cost().await;

    let names: Vec<String> = systems.iter().map(|s| s.name()).collect();
    let mut md = String::new();
    md += &format!("Unloaded p99 {} ms; goodput = successes within 2× that ({} ms) per second, as a fraction of C = {CAPACITY:.0} req/s. p50/p99 in ms of successful requests.\n\n", ms(Some(unloaded_p99)), ms(Some(good_within)));
    md += "| system | load | goodput | critical p50/p99 | default p50/p99 | sheddable p50/p99 | batch p50/p99 | success c/d/s/b |\n|---|---|---|---|---|---|---|---|\n";
    for r in &rows {
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
        md += &format!(
            "| {} | {}×C | {:.2} | {} | {} | {} | {} | {} % |\n",
            r.system,
            r.load,
            r.goodput,
            t(0),
            t(1),
            t(2),
            t(3),
            succ.join("/")
        );
    }
    md += "\n| system | well-behaved success (all / worst tenant) | flooder ÷ its max-min fair share | p99 back within 2× after a 2× slowdown |\n|---|---|---|---|\n";
    for ((name, ok, worst, share), (_, back)) in fair.iter().zip(&recovery) {
        let back = back.map_or("not within the phase".into(), |d| {
            format!("{} ms", d.as_millis())
        });
        md += &format!(
            "| {name} | {:.1} % / {:.1} % | {:.2} | {back} |\n",
            ok * 100.0,
            worst * 100.0,
            share
        );
    }
    md += &format!("\nA rejection costs {core:.2} µs in the shedder and {layer:.2} µs through the layer (no HTTP).\n");
    println!("\n{md}");
    let _ = std::fs::write("docs/shed.svg", svg(&rows, &names));
    let _ = std::fs::write("target/bench-shed.md", md);
}
