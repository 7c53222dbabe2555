//! A `tower::Layer` that bounds the requests in flight per key, as [`RateLimitLayer`] bounds their
//! rate: each request takes a slot of its key ([`Limiter::acquire`]) and the response body holds
//! it ([`Held`]) until the body ends or is dropped, so a streamed response keeps its slot (renewed
//! by the guard) for as long as it streams. Denied: `429 Too Many Requests` with `Retry-After`.
//!
//! [`RateLimitLayer`]: crate::layer::RateLimitLayer

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use crate::limiter::Limiter;
use crate::slot::{ConcurrencyLimit, SlotGuard};

/// Bounds every request by `key(&request)` under `limit`; a request whose key is `None` passes
/// unlimited.
#[derive(Clone)]
pub struct ConcurrencyLimitLayer<K> {
    limiter: Limiter,
    limit: ConcurrencyLimit,
    key: K,
}

impl<K> ConcurrencyLimitLayer<K> {
    pub fn new(limiter: Limiter, limit: ConcurrencyLimit, key: K) -> ConcurrencyLimitLayer<K> {
        ConcurrencyLimitLayer {
            limiter,
            limit,
            key,
        }
    }
}

impl<S, K: Clone> Layer<S> for ConcurrencyLimitLayer<K> {
    type Service = ConcurrencyLimited<S, K>;

    fn layer(&self, inner: S) -> ConcurrencyLimited<S, K> {
        ConcurrencyLimited {
            inner,
            limiter: self.limiter.clone(),
            limit: self.limit.clone(),
            key: self.key.clone(),
        }
    }
}

/// The service [`ConcurrencyLimitLayer`] wraps around the inner one.
#[derive(Clone)]
pub struct ConcurrencyLimited<S, K> {
    inner: S,
    limiter: Limiter,
    limit: ConcurrencyLimit,
    key: K,
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimited<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
    K: Fn(&Request<ReqB>) -> Option<String> + Clone + Send + Sync + 'static,
{
    type Response = Response<Held<ResB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Held<ResB>>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The inner service that was polled ready is the one to call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let key = (self.key)(&req);
        let (limiter, limit) = (self.limiter.clone(), self.limit.clone());
        Box::pin(async move {
            let Some(key) = key else {
                return Ok(inner.call(req).await?.map(|b| Held::new(b, None)));
            };
            let slot = match limiter.acquire(&limit, &key).await {
                Ok(slot) => slot,
                Err(e) => {
                    // A limit the store rejects is a configuration error: say so, admit nothing.
                    log::error!("concurrency limit {}: {e}", limit.name());
                    return Ok(status(StatusCode::INTERNAL_SERVER_ERROR, None));
                }
            };
            let Some(guard) = slot.guard else {
                let retry = slot.decision.retry_after_ms.unwrap_or(0).div_ceil(1000);
                return Ok(status(StatusCode::TOO_MANY_REQUESTS, Some(retry.max(1))));
            };
            // Dropped with this future if the caller gives up before the response: the slot
            // goes back then.
            let resp = inner.call(req).await?;
            Ok(resp.map(|b| Held::new(b, Some(guard))))
        })
    }
}

fn status<B: Default>(code: StatusCode, retry_after_s: Option<u64>) -> Response<Held<B>> {
    let mut resp = Response::new(Held::new(B::default(), None));
    *resp.status_mut() = code;
    if let Some(s) = retry_after_s {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

pin_project_lite::pin_project! {
    /// A response body that holds its request's slot until it ends or is dropped.
    pub struct Held<B> {
        #[pin]
        inner: B,
        guard: Option<SlotGuard>,
    }
}

impl<B> Held<B> {
    fn new(inner: B, guard: Option<SlotGuard>) -> Held<B> {
        Held { inner, guard }
    }
}

impl<B: Default> Default for Held<B> {
    fn default() -> Held<B> {
        Held::new(B::default(), None)
    }
}

impl<B: Body> Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            // The body is done: the slot goes back now, not when the body is dropped.
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
