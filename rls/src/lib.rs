//! An Envoy Rate Limit Service (`envoy.service.ratelimit.v3.RateLimitService`) that loads
//! envoyproxy/ratelimit's config files and environment unchanged and decides on the
//! redis-ratelimit module through the client crate. docs/envoy.md is the guide.

pub mod config;
pub mod denials;
pub mod files;
pub mod grpc;
pub mod headers;
pub mod http;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod server;
pub mod service;
pub mod settings;
pub mod settle;
pub mod store_settings;

/// Envoy's generated types this server speaks (requests, responses, the gRPC client).
pub use envoy_types::pb;
