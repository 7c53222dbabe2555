//! The sidecar: an HTTP/1.1 and h2 (cleartext) reverse proxy on hyper that puts the shedder in
//! front of one upstream, for services in any language; `/metrics` and `/healthcheck` on the
//! listen port (or on `--admin-listen`). A permit is held until the upstream's response headers
//! arrive: a streaming body is not counted as in flight.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::admission::Completion;
use crate::classify::{ByHeaders, Classify};
use crate::response;
use crate::shedder::Shedder;

pub type Body = BoxBody<Bytes, hyper::Error>;

/// Headers of one hop only (RFC 9110 7.6.1), never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

pub struct Sidecar {
    pub shedder: Shedder,
    pub classify: ByHeaders,
    scheme: Scheme,
    authority: Authority,
    client: Client<HttpConnector, Incoming>,
    metrics: Option<PrometheusHandle>,
}

impl Sidecar {
    /// `upstream` must be `http://HOST:PORT` (checked by the settings); `metrics` renders
    /// `/metrics` (none: 404).
    pub fn new(
        shedder: Shedder,
        classify: ByHeaders,
        upstream: &Uri,
        upstream_h2: bool,
        metrics: Option<PrometheusHandle>,
    ) -> Result<Sidecar, String> {
        let authority = upstream
            .authority()
            .cloned()
            .ok_or_else(|| format!("--upstream has no host: {upstream}"))?;
        let client = Client::builder(TokioExecutor::new())
            .http2_only(upstream_h2)
            .build_http();
        Ok(Sidecar {
            shedder,
            classify,
            scheme: Scheme::HTTP,
            authority,
            client,
            metrics,
        })
    }

    fn admin(&self, req: &Request<Incoming>) -> Option<Response<Body>> {
        if req.method() != http::Method::GET {
            return None;
        }
        match req.uri().path() {
            "/healthcheck" => Some(text(StatusCode::OK, "OK\n".into())),
            "/metrics" => Some(match &self.metrics {
                Some(h) => text(StatusCode::OK, h.render()),
                None => text(StatusCode::NOT_FOUND, "no metrics recorder\n".into()),
            }),
            _ => None,
        }
    }

    async fn forward(&self, req: Request<Incoming>) -> Response<Body> {
        let ticket = self.classify.classify(&req);
        let grpc = response::is_grpc(&req);
        let permit = match self.shedder.acquire(&ticket).await {
            Ok(p) => p,
            Err(r) => return response::rejected(&r, grpc),
        };
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build();
        let Ok(uri) = uri else {
            permit.finish(Completion::Answered);
            return text(StatusCode::BAD_REQUEST, "bad request target\n".into());
        };
        parts.uri = uri;
        // The upstream gets the version its connection speaks.
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::HOST);
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) => {
                let overloaded = response::overloaded(resp.status());
                permit.finish(if overloaded {
                    Completion::Dropped
                } else {
                    Completion::Answered
                });
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(e) => {
                permit.finish(Completion::Dropped);
                log::warn!("upstream {}: {e}", self.authority);
                text(StatusCode::BAD_GATEWAY, "upstream unavailable\n".into())
            }
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>, admin: bool) -> Response<Body> {
        if admin {
            if let Some(resp) = self.admin(&req) {
                return resp;
            }
        }
        self.forward(req).await
    }
}

fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    // Headers the Connection header names are hop-by-hop too.
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for n in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        h.remove(n);
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Serves connections from `listener` until the task is dropped: the proxy, and the admin
/// routes when `admin` (on a separate admin listener, `forward` is never reached: see
/// [`serve_admin`]).
pub async fn serve(listener: TcpListener, sidecar: Arc<Sidecar>, admin: bool) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let _ = socket.set_nodelay(true);
        let sidecar = sidecar.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let sidecar = sidecar.clone();
                async move { Ok::<_, Infallible>(sidecar.handle(req, admin).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

/// Serves only `/metrics` and `/healthcheck` (404 for anything else).
pub async fn serve_admin(listener: TcpListener, sidecar: Arc<Sidecar>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let sidecar = sidecar.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let resp = sidecar
                    .admin(&req)
                    .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "not found\n".into()));
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}
