//! The systems compared, each over the same service: 8 workers and a service time the slowdown
//! phase changes. The service counts how long its workers were held, so the bench can say what
//! it could really serve.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use ratelimit_shed::proxy::{self, Sidecar};
use ratelimit_shed::{ByHeaders, Settings, ShedLayer, Shedder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::{Layer, ServiceBuilder, ServiceExt};

pub const WORKERS: usize = 8;
pub const SERVICE_MS: u64 = 10;
/// C, the service's capacity in requests per second: its workers, each busy a service time.
pub const CAPACITY: f64 = WORKERS as f64 * 1000.0 / SERVICE_MS as f64;

/// The service: a worker each, then the service time.
#[derive(Clone)]
pub struct Work {
    workers: Arc<Semaphore>,
    pub service_us: Arc<AtomicU64>,
    /// Requests served and the nanoseconds their workers were held, since the last `take`.
    served: Arc<AtomicU64>,
    held_ns: Arc<AtomicU64>,
}

impl Work {
    fn new() -> Work {
        Work {
            workers: Arc::new(Semaphore::new(WORKERS)),
            service_us: Arc::new(AtomicU64::new(SERVICE_MS * 1000)),
            served: Arc::new(AtomicU64::new(0)),
            held_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    async fn serve(&self) -> Response<String> {
        let _w = self.workers.acquire().await;
        let start = Instant::now();
        let us = self.service_us.load(Ordering::Relaxed);
        // A worker is a thread: tokio's timer rounds a sleep up to its next millisecond tick
        // (a 10 ms sleep held a worker 11.3–12.5 ms in the first run of this bench, so the
        // service could not serve its C), a thread's sleep overshoots by tens of µs.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(Duration::from_micros(us)))
            .await;
        let held = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.held_ns.fetch_add(held, Ordering::Relaxed);
        self.served.fetch_add(1, Ordering::Relaxed);
        Response::new(String::new())
    }

    /// The mean time a worker was held per request since the last call (the service time as
    /// the machine really delivered it), and resets the count.
    pub fn take_hold(&self) -> Option<Duration> {
        let n = self.served.swap(0, Ordering::Relaxed);
        let ns = self.held_ns.swap(0, Ordering::Relaxed);
        (n > 0).then(|| Duration::from_nanos(ns / n))
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

pub fn headers() -> ByHeaders {
    ByHeaders::new(
        Some(http::HeaderName::from_static("x-priority")),
        Some(http::HeaderName::from_static("x-tenant")),
    )
}

/// The systems compared.
#[derive(Clone, Copy, PartialEq)]
pub enum System {
    Bare,
    Static(usize),
    Layer,
    Sidecar,
}

/// A started system: where to send the load, its service, and our shedder if it has one.
pub struct Started {
    pub addr: SocketAddr,
    pub work: Work,
    pub limits: Option<Limits>,
}

impl System {
    pub fn name(self) -> String {
        match self {
            System::Bare => "no shedder".into(),
            System::Static(n) => format!("tower ConcurrencyLimit({n}) + LoadShed"),
            System::Layer => "ShedLayer".into(),
            System::Sidecar => "sidecar".into(),
        }
    }

    pub async fn start(self) -> Started {
        let work = Work::new();
        let mut shedder = None;
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
                let s = Shedder::new(Settings::default()).unwrap();
                shedder = Some(s.clone());
                let svc = ShedLayer::new(s, headers()).layer(work_service(&work));
                serve(BoxSvc::new(svc)).await
            }
            System::Sidecar => {
                let upstream = serve(work_service(&work)).await;
                let s = Shedder::new(Settings::default()).unwrap();
                shedder = Some(s.clone());
                let uri = format!("http://{upstream}").parse().unwrap();
                let sidecar = Sidecar::new(s, headers(), &uri, false, None).unwrap();
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                tokio::spawn(proxy::serve(listener, Arc::new(sidecar), false));
                addr
            }
        };
        Started {
            addr,
            work,
            limits: shedder.map(Limits::watch),
        }
    }
}

/// The shedder's limit read every few milliseconds, to say where the controller settled.
pub struct Limits {
    seen: Arc<Mutex<Vec<usize>>>,
    shedder: Shedder,
}

impl Limits {
    fn watch(shedder: Shedder) -> Limits {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, w) = (shedder.clone(), seen.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            loop {
                tick.tick().await;
                let limit = s.stats().limit;
                w.lock().unwrap().push(limit);
            }
        });
        Limits { seen, shedder }
    }

    /// The limit's mean, min and max since the last call, and the no-load latency now.
    pub fn take(&self) -> String {
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        let min_rtt = self.shedder.observed().min_rtt;
        if seen.is_empty() {
            return "–".into();
        }
        let mean = seen.iter().sum::<usize>() as f64 / seen.len() as f64;
        let min = seen.iter().min().copied().unwrap_or(0);
        let max = seen.iter().max().copied().unwrap_or(0);
        format!(
            "{mean:.1} ({min}–{max}), min RTT {}",
            crate::load::ms(min_rtt)
        )
    }
}
