//! A `tower::Layer` that limits each request by a key taken from it: `429 Too Many Requests` with
//! `Retry-After` and the RateLimit fields when denied, the fields added to the inner response
//! when admitted. The client's address for a key: [`client_ip`] (re-exported from
//! [`crate::client_ip`]). For a cost known only once the response is done (model tokens),
//! [`TokenLimitLayer`] reserves an estimate and settles from the response. For the requests in
//! flight per key: [`ConcurrencyLimitLayer`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

pub use crate::client_ip::{client_ip, Prefixes, Trusted};
use crate::http::Headers;
use crate::limit::Limit;
use crate::limiter::Limiter;
pub use crate::metered::{
    Count, DefaultEstimate, Estimate, Metered, Settles, TokenLimit, TokenLimitLayer, Uncounted,
    UsedTokens,
};
pub use crate::slot_layer::{ConcurrencyLimitLayer, ConcurrencyLimited, Held};

/// Limits every request by `key(&request)` under `limit`; a request whose key is `None` passes
/// unlimited.
#[derive(Clone)]
pub struct RateLimitLayer<K> {
    limiter: Limiter,
    limit: Limit,
    key: K,
    headers: Arc<Headers>,
}

impl<K> RateLimitLayer<K> {
    pub fn new(limiter: Limiter, limit: Limit, key: K) -> RateLimitLayer<K> {
        RateLimitLayer {
            limiter,
            limit,
            key,
            headers: Arc::new(Headers::default()),
        }
    }

    /// How the headers are written (the burst parameter's name, jitter).
    pub fn headers(mut self, headers: Headers) -> RateLimitLayer<K> {
        self.headers = Arc::new(headers);
        self
    }
}

impl<S, K: Clone> Layer<S> for RateLimitLayer<K> {
    type Service = RateLimit<S, K>;

    fn layer(&self, inner: S) -> RateLimit<S, K> {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            limit: self.limit.clone(),
            key: self.key.clone(),
            headers: self.headers.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around the inner one.
#[derive(Clone)]
pub struct RateLimit<S, K> {
    inner: S,
    limiter: Limiter,
    limit: Limit,
    key: K,
    headers: Arc<Headers>,
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
    K: Fn(&Request<ReqB>) -> Option<String> + Clone + Send + Sync + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The inner service that was polled ready is the one to call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let key = (self.key)(&req);
        let (limiter, limit, headers) = (
            self.limiter.clone(),
            self.limit.clone(),
            self.headers.clone(),
        );
        Box::pin(async move {
            let Some(key) = key else {
                return inner.call(req).await;
            };
            let decision = match limiter.check(&limit, &key).await {
                Ok(d) => d,
                Err(e) => {
                    // A limit the store rejects is a configuration error: say so, admit nothing.
                    log::error!("rate limit {}: {e}", limit.name());
                    let mut resp = Response::new(ResB::default());
                    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    return Ok(resp);
                }
            };
            let r = headers.response(limit.name(), &limit.store_policy(), &decision);
            let mut resp = if decision.allowed {
                inner.call(req).await?
            } else {
                let mut resp = Response::new(ResB::default());
                *resp.status_mut() = r.status;
                resp
            };
            resp.headers_mut().extend(r.headers);
            Ok(resp)
        })
    }
}
