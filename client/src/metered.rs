//! The tower layer for a cost known only once the response is done (model tokens): each request
//! reserves an estimate on the layer's limits (one `RL.ALL`), and the reservation is settled from
//! the response — at the count a handler put in the response's extensions ([`UsedTokens`]), or
//! at what a [`Metered`] body counted frame by frame as it streamed. A body that ends settles
//! before it reports its end (the client sees the end once the store has counted it); a body
//! dropped mid-stream settles what streamed so far. docs/tokens.md is the guide.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use crate::http::Headers;
use crate::limit::Limit;
use crate::limiter::Limiter;
use crate::reservation::{Reservation, DEFAULT_GRACE};

/// What a handler used, set in its response's extensions: the reservation is settled at this
/// count when the response is produced, and the body is not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedTokens(pub u64);

/// The estimate of a request: `Some(n)`, or `None` for the layer's default.
pub trait Estimate<B> {
    fn estimate(&self, req: &Request<B>) -> Option<u64>;
}

impl<B, F: Fn(&Request<B>) -> Option<u64>> Estimate<B> for F {
    fn estimate(&self, req: &Request<B>) -> Option<u64> {
        self(req)
    }
}

/// Every request reserves the layer's default estimate.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultEstimate;

impl<B> Estimate<B> for DefaultEstimate {
    fn estimate(&self, _: &Request<B>) -> Option<u64> {
        None
    }
}

/// The tokens in one data frame of the response body.
pub trait Count<D> {
    fn count(&self, data: &D) -> u64;

    /// False: the body is not metered (settled at the estimate when the response is produced).
    fn meters(&self) -> bool {
        true
    }
}

impl<D, F: Fn(&D) -> u64> Count<D> for F {
    fn count(&self, data: &D) -> u64 {
        self(data)
    }
}

/// No counter: a response without [`UsedTokens`] is settled at its estimate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Uncounted;

impl<D> Count<D> for Uncounted {
    fn count(&self, _: &D) -> u64 {
        0
    }

    fn meters(&self) -> bool {
        false
    }
}

/// Settles in flight (a body's end, a dropped body's): a clean shutdown waits for them before
/// `Limiter::shutdown`.
#[derive(Default)]
pub struct Settles {
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Settles {
    /// Returns once no settle is in flight.
    pub async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// The settle of `r` at `actual`, counted in flight until it is done (or dropped).
    fn settle(self: &Arc<Settles>, r: Reservation, actual: u64) -> SettleFuture {
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.clone());
        Box::pin(async move {
            if let Err(e) = r.settle(actual).await {
                log::error!("settle at {actual} tokens: {e}");
            }
            drop(running);
        })
    }
}

/// One settle in flight, until dropped.
struct Running(Arc<Settles>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

type SettleFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Reserves `estimate(&request)` (or the default) on every limit, each at its key from
/// `keys(&request)` (one key per limit, in order; `None` passes unlimited; all in one hash slot
/// on a Cluster), and settles from the response. A denial is `429` with `Retry-After` and the
/// RateLimit fields; an admitted response carries the fields of the reservation.
#[derive(Clone)]
pub struct TokenLimitLayer<K, E = DefaultEstimate, C = Uncounted> {
    limiter: Limiter,
    limits: Arc<Vec<Limit>>,
    keys: K,
    estimate: E,
    default_estimate: u64,
    counter: C,
    grace: Duration,
    headers: Arc<Headers>,
    settles: Arc<Settles>,
}

impl<K> TokenLimitLayer<K> {
    /// Every request reserves `default_estimate` until [`TokenLimitLayer::estimate`] says
    /// otherwise; responses are settled at [`UsedTokens`], else at the estimate until
    /// [`TokenLimitLayer::count`] meters the body.
    pub fn new(
        limiter: Limiter,
        limits: Vec<Limit>,
        keys: K,
        default_estimate: u64,
    ) -> TokenLimitLayer<K> {
        TokenLimitLayer {
            limiter,
            limits: Arc::new(limits),
            keys,
            estimate: DefaultEstimate,
            default_estimate,
            counter: Uncounted,
            grace: DEFAULT_GRACE,
            headers: Arc::new(Headers::default()),
            settles: Arc::default(),
        }
    }
}

impl<K, E, C> TokenLimitLayer<K, E, C> {
    /// The estimate of each request (`None`: the default).
    pub fn estimate<E2>(self, estimate: E2) -> TokenLimitLayer<K, E2, C> {
        TokenLimitLayer {
            limiter: self.limiter,
            limits: self.limits,
            keys: self.keys,
            estimate,
            default_estimate: self.default_estimate,
            counter: self.counter,
            grace: self.grace,
            headers: self.headers,
            settles: self.settles,
        }
    }

    /// Meter the response body: `counter(&data)` tokens per data frame, settled when the body
    /// ends or is dropped.
    pub fn count<C2>(self, counter: C2) -> TokenLimitLayer<K, E, C2> {
        TokenLimitLayer {
            limiter: self.limiter,
            limits: self.limits,
            keys: self.keys,
            estimate: self.estimate,
            default_estimate: self.default_estimate,
            counter,
            grace: self.grace,
            headers: self.headers,
            settles: self.settles,
        }
    }

    /// How long a reservation whose response never came (a cancelled request) holds its
    /// estimate before it goes back (`Reservation::with_grace`).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How the headers are written (the burst parameter's name, jitter).
    pub fn headers(mut self, headers: Headers) -> Self {
        self.headers = Arc::new(headers);
        self
    }

    /// The settles in flight of every service this layer made.
    pub fn settles(&self) -> Arc<Settles> {
        self.settles.clone()
    }
}

impl<S, K: Clone, E: Clone, C: Clone> Layer<S> for TokenLimitLayer<K, E, C> {
    type Service = TokenLimit<S, K, E, C>;

    fn layer(&self, inner: S) -> TokenLimit<S, K, E, C> {
        TokenLimit {
            inner,
            layer: TokenLimitLayer {
                limiter: self.limiter.clone(),
                limits: self.limits.clone(),
                keys: self.keys.clone(),
                estimate: self.estimate.clone(),
                default_estimate: self.default_estimate,
                counter: self.counter.clone(),
                grace: self.grace,
                headers: self.headers.clone(),
                settles: self.settles.clone(),
            },
        }
    }
}

/// The service [`TokenLimitLayer`] wraps around the inner one.
#[derive(Clone)]
pub struct TokenLimit<S, K, E, C> {
    inner: S,
    layer: TokenLimitLayer<K, E, C>,
}

fn error_response<B: Default, C>(status: StatusCode, counter: C) -> Response<Metered<B, C>> {
    let mut resp = Response::new(Metered::unmetered(B::default(), counter));
    *resp.status_mut() = status;
    resp
}

impl<S, K, E, C, ReqB, ResB> Service<Request<ReqB>> for TokenLimit<S, K, E, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Body + Default + Send + 'static,
    K: Fn(&Request<ReqB>) -> Option<Vec<String>> + Clone + Send + Sync + 'static,
    E: Estimate<ReqB> + Clone + Send + Sync + 'static,
    C: Count<ResB::Data> + Clone + Send + Sync + 'static,
{
    type Response = Response<Metered<ResB, C>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The inner service that was polled ready is the one to call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let l = &self.layer;
        let keys = (l.keys)(&req);
        let estimate = l.estimate.estimate(&req).unwrap_or(l.default_estimate);
        let (limiter, limits, counter) = (l.limiter.clone(), l.limits.clone(), l.counter.clone());
        let (grace, headers, settles) = (l.grace, l.headers.clone(), l.settles.clone());
        Box::pin(async move {
            let Some(keys) = keys else {
                let resp = inner.call(req).await?;
                return Ok(resp.map(|b| Metered::unmetered(b, counter)));
            };
            if keys.len() != limits.len() {
                log::error!("{} keys for {} limits", keys.len(), limits.len());
                return Ok(error_response(StatusCode::INTERNAL_SERVER_ERROR, counter));
            }
            let pairs: Vec<(&Limit, &str)> =
                limits.iter().zip(keys.iter().map(|k| k.as_str())).collect();
            let reservation = match limiter.reserve(&pairs, estimate).await {
                Ok(r) => r.with_grace(grace),
                Err(e) => {
                    // A limit the store rejects is a configuration error: say so, admit nothing.
                    log::error!(
                        "token limit {}: {e}",
                        limits.first().map_or("", |l| l.name())
                    );
                    return Ok(error_response(StatusCode::INTERNAL_SERVER_ERROR, counter));
                }
            };
            let named: Vec<(&str, &crate::command::Policy)> =
                limits.iter().map(|l| (l.name(), l.policy())).collect();
            let r = headers.response_all(&named, reservation.decision());
            if !reservation.admitted() {
                let mut resp = error_response(r.status, counter);
                resp.headers_mut().extend(r.headers);
                return Ok(resp);
            }
            // A cancelled call drops the reservation: its estimate goes back after the grace.
            let resp = match inner.call(req).await {
                Ok(resp) => resp,
                Err(e) => {
                    // No response: nothing was served.
                    settles.settle(reservation, 0).await;
                    return Err(e);
                }
            };
            let (mut parts, body) = resp.into_parts();
            parts.headers.extend(r.headers);
            let used = parts.extensions.get::<UsedTokens>().map(|u| u.0);
            let body = match used {
                Some(n) => {
                    settles.settle(reservation, n).await;
                    Metered::unmetered(body, counter)
                }
                None if !counter.meters() => {
                    settles.settle(reservation, estimate).await;
                    Metered::unmetered(body, counter)
                }
                None => Metered::new(body, counter, reservation, settles),
            };
            Ok(Response::from_parts(parts, body))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts the tokens of its data frames and settles its reservation
    /// at that count when it ends (before it reports its end) or when it is dropped.
    pub struct Metered<B, C> {
        #[pin]
        inner: B,
        counter: C,
        counted: u64,
        reservation: Option<Reservation>,
        settles: Option<Arc<Settles>>,
        settling: Option<SettleFuture>,
    }

    impl<B, C> PinnedDrop for Metered<B, C> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let settling = match (this.settling.take(), this.reservation.take(), this.settles.as_ref()) {
                (Some(f), _, _) => f,
                (None, Some(r), Some(s)) => s.settle(r, *this.counted),
                // Nothing open, or no tracker: a dropped reservation gives back after its grace.
                _ => return,
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(settling);
                }
                // Without a runtime the settle cannot run; the reservation inside it is dropped
                // and its estimate goes back after the grace.
                Err(_) => drop(settling),
            }
        }
    }
}

impl<B, C> Metered<B, C> {
    fn new(inner: B, counter: C, r: Reservation, settles: Arc<Settles>) -> Metered<B, C> {
        Metered {
            inner,
            counter,
            counted: 0,
            reservation: Some(r),
            settles: Some(settles),
            settling: None,
        }
    }

    /// The body as it is: nothing to settle.
    fn unmetered(inner: B, counter: C) -> Metered<B, C> {
        Metered {
            inner,
            counter,
            counted: 0,
            reservation: None,
            settles: None,
            settling: None,
        }
    }

    /// The tokens counted so far.
    pub fn counted(&self) -> u64 {
        self.counted
    }
}

impl<B: Body, C: Count<B::Data>> Body for Metered<B, C> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        if this.settling.is_none() {
            match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        *this.counted = this.counted.saturating_add(this.counter.count(data));
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => match (this.reservation.take(), this.settles.as_ref()) {
                    (Some(r), Some(s)) => *this.settling = Some(s.settle(r, *this.counted)),
                    _ => return Poll::Ready(None),
                },
            }
        }
        if let Some(f) = this.settling.as_mut() {
            std::task::ready!(f.as_mut().poll(cx));
            *this.settling = None;
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        // Not before the settle: the end is reported once the store has counted the body.
        self.reservation.is_none() && self.settling.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
