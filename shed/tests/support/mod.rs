//! Real parts for the shedder's tests: an HTTP service on hyper with a fixed number of workers
//! whose service time is a gate the test opens (so counts, never timings, decide the outcome),
//! a server for any tower service on a free loopback port, and a hyper client.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::{Service, ServiceExt};

/// The service's work: a worker each, then the gate (one permit per request the test lets
/// finish), then the status the request asked for in `x-status` (200 when none).
#[derive(Clone)]
pub struct Work {
    workers: Arc<Semaphore>,
    gate: Arc<Semaphore>,
    entered: Arc<watch::Sender<usize>>,
    done: Arc<watch::Sender<usize>>,
    pub order: Arc<Mutex<Vec<String>>>,
    busy: Arc<Mutex<(usize, usize)>>,
}

impl Work {
    pub fn new(workers: usize) -> Work {
        Work {
            workers: Arc::new(Semaphore::new(workers)),
            gate: Arc::new(Semaphore::new(0)),
            entered: Arc::new(watch::channel(0).0),
            done: Arc::new(watch::channel(0).0),
            order: Arc::new(Mutex::new(Vec::new())),
            busy: Arc::new(Mutex::new((0, 0))),
        }
    }

    /// Lets `n` requests in service finish.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Waits until `n` requests in all have reached a worker.
    pub async fn entered(&self, n: usize) {
        let mut rx = self.entered.subscribe();
        let _ = rx.wait_for(|v| *v >= n).await;
    }

    /// How many requests have reached a worker so far.
    pub fn count(&self) -> usize {
        *self.entered.borrow()
    }

    /// Waits until `n` requests in all have finished their work.
    pub async fn done(&self, n: usize) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|v| *v >= n).await;
    }

    /// The most requests that were in service at once.
    pub fn max_busy(&self) -> usize {
        self.busy.lock().unwrap().1
    }

    pub async fn serve<B>(&self, req: Request<B>) -> Response<String> {
        let Ok(_worker) = self.workers.acquire().await else {
            return Response::new(String::new());
        };
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        self.order
            .lock()
            .unwrap()
            .push(header("x-id").unwrap_or_default());
        {
            let mut b = self.busy.lock().unwrap();
            b.0 += 1;
            b.1 = b.1.max(b.0);
        }
        self.entered.send_modify(|v| *v += 1);
        if let Ok(p) = self.gate.acquire().await {
            p.forget();
        }
        self.busy.lock().unwrap().0 -= 1;
        self.done.send_modify(|v| *v += 1);
        let status = header("x-status")
            .and_then(|s| s.parse().ok())
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        let mut resp = Response::new("ok".to_string());
        *resp.status_mut() = status;
        resp
    }

    /// The work as a tower service.
    pub fn service(
        &self,
    ) -> impl Service<
        Request<Incoming>,
        Response = Response<String>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
    > + Clone
           + Send
           + 'static {
        let work = self.clone();
        tower::service_fn(move |req: Request<Incoming>| {
            let work = work.clone();
            async move { Ok::<_, Infallible>(work.serve(req).await) }
        })
    }
}

/// Serves `svc` (HTTP/1.1 and h2) on a free loopback port.
pub async fn serve<S>(svc: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<String>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let svc = svc.clone();
            tokio::spawn(async move {
                let hyper_svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(socket), hyper_svc)
                    .await;
            });
        }
    });
    addr
}

/// What a client saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub status: u16,
    pub reason: Option<String>,
    pub retry_after: Option<String>,
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// GET `path` at `addr` with the headers given.
pub async fn get(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Seen {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = Seen {
        status: resp.status().as_u16(),
        reason: header("x-shed-reason"),
        retry_after: header("retry-after"),
    };
    let _ = resp.into_body().collect().await;
    seen
}

/// Waits (a condition, not a time: the bound only stops a broken test from hanging) until
/// `cond` holds.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..20_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never: {what}");
}
