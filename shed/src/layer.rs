//! The tower layer: `ShedLayer::new(shedder, classify)` in front of a service (axum, hyper,
//! tonic). A shed request is answered at once (`response::rejected`); an admitted one holds its
//! permit until the inner service's response (its headers) is ready, and the permit's drop gives
//! the place back however the call ends. Seed order: edge → the client's `RateLimitLayer` →
//! `ShedLayer` → service (so a request over its key's limit never takes a place here).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use crate::admission::Completion;
use crate::classify::Classify;
use crate::response;
use crate::shedder::Shedder;

#[derive(Clone)]
pub struct ShedLayer<C> {
    shedder: Shedder,
    classify: C,
}

impl<C> ShedLayer<C> {
    pub fn new(shedder: Shedder, classify: C) -> ShedLayer<C> {
        ShedLayer { shedder, classify }
    }
}

impl<S, C: Clone> Layer<S> for ShedLayer<C> {
    type Service = Shed<S, C>;

    fn layer(&self, inner: S) -> Shed<S, C> {
        Shed {
            inner,
            shedder: self.shedder.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// The service [`ShedLayer`] wraps around the inner one.
#[derive(Clone)]
pub struct Shed<S, C> {
    inner: S,
    shedder: Shedder,
    classify: C,
}

impl<S, C, ReqB, ResB> Service<Request<ReqB>> for Shed<S, C>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
    C: Classify<ReqB>,
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
        let ticket = self.classify.classify(&req);
        let grpc = response::is_grpc(&req);
        let shedder = self.shedder.clone();
        Box::pin(async move {
            let permit = match shedder.acquire(&ticket).await {
                Ok(p) => p,
                Err(r) => return Ok(response::rejected(&r, grpc)),
            };
            let result = inner.call(req).await;
            permit.finish(match &result {
                Ok(resp) if !response::overloaded(resp.status()) => Completion::Answered,
                _ => Completion::Dropped,
            });
            result
        })
    }
}
