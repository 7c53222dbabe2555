//! An Envoy Rate Limit Service (`envoy.service.ratelimit.v3.RateLimitService`) that loads
//! envoyproxy/ratelimit's config files and environment unchanged and decides on the
//! redis-ratelimit module through the client crate. docs/envoy.md is the guide.

pub mod answer;
pub mod check;
pub mod concurrency;
pub mod config;
pub mod debug;
pub mod denials;
pub mod files;
pub mod go_duration;
pub mod grpc;
pub mod headers;
pub mod health;
pub mod http;
pub mod item;
pub mod json;
pub mod listen;
pub mod load;
pub mod local_slots;
pub mod logging;
pub mod matching;
pub mod metadata;
pub mod metrics;
pub mod reply;
pub mod server;
pub mod service;
pub mod settings;
pub mod settle;
pub mod statsd;
pub mod steps;
pub mod store_calls;
pub mod store_settings;
pub mod tls;
pub mod wildcard;
pub mod yaml_limits;

/// Envoy's generated types this server speaks (requests, responses, the gRPC client).
pub use envoy_types::pb;
