//! The load shedder in front of a service (the capacity class; docs/shedding.md): an adaptive
//! concurrency limit found from the service's own latency, priority tiers, a fair share per
//! tenant, a short CoDel-style queue, and rejections with a reason. As a tower layer
//! ([`layer::ShedLayer`]) and as a sidecar proxy (the `redis-ratelimit-shed` binary).

pub mod admission;
pub mod classify;
pub mod clock;
pub mod gradient;
pub mod layer;
pub mod limit;
pub mod meter;
pub mod proxy;
pub mod queue;
pub mod rejection;
pub mod response;
pub mod settings;
pub mod shedder;
pub mod tenants;
pub mod tier;

pub use admission::{Completion, QueueSettings, Ticket};
pub use classify::{ByHeaders, Classify};
pub use layer::{Shed, ShedLayer};
pub use limit::Bounds;
pub use rejection::{Reason, Rejection};
pub use shedder::{Permit, Settings, Shedder, Stats};
pub use tier::Tier;
