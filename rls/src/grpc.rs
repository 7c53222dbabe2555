//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over the
//! [`Service`], with a refusal mapped to the status Envoy's `failure_mode_deny` acts on.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::service::{Refusal, Service};

pub struct Grpc(pub Arc<Service>);

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = std::time::Instant::now();
        let answer = self.0.should_rate_limit(request.get_ref()).await;
        self.0.metrics.request("ShouldRateLimit", started.elapsed());
        match answer {
            Ok(r) => Ok(Response::new(r)),
            Err(Refusal::BadRequest(m)) => Err(Status::invalid_argument(m)),
            Err(Refusal::NoConfig) => {
                Err(Status::unavailable("no rate limit configuration loaded"))
            }
            Err(Refusal::Store(e)) => Err(Status::unavailable(e.to_string())),
        }
    }
}
