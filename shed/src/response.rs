//! The answer to a shed request, built without touching the service: HTTP `503` with
//! `Retry-After`, or for gRPC a trailers-only answer whose `grpc-status` is `UNAVAILABLE` (14:
//! the service is full, another replica or a retry later may serve it) or `RESOURCE_EXHAUSTED`
//! (8: this tenant is over its share). Both carry `x-shed-reason`, for the service's logs.

use http::{HeaderValue, Request, Response, StatusCode};

use crate::rejection::{Reason, Rejection};

pub const REASON_HEADER: &str = "x-shed-reason";

const GRPC_UNAVAILABLE: &str = "14";
const GRPC_RESOURCE_EXHAUSTED: &str = "8";

pub fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

pub fn rejected<B: Default>(r: &Rejection, grpc: bool) -> Response<B> {
    let mut resp = Response::new(B::default());
    let h = resp.headers_mut();
    h.insert(REASON_HEADER, HeaderValue::from_static(r.reason.name()));
    let secs = r.retry_after.as_secs().max(1);
    h.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    if grpc {
        let status = match r.reason {
            Reason::OverShare => GRPC_RESOURCE_EXHAUSTED,
            Reason::Overloaded | Reason::QueueTimeout => GRPC_UNAVAILABLE,
        };
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert("grpc-status", HeaderValue::from_static(status));
        h.insert("grpc-message", HeaderValue::from_static(r.reason.name()));
    } else {
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    resp
}

/// Whether an answer says the service is overloaded (fed to the limit as a drop).
pub fn overloaded(status: StatusCode) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::GATEWAY_TIMEOUT
}
