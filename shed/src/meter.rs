//! The shedder's metrics through the `metrics` crate (the sidecar renders them on `/metrics`):
//! gauges `shed_limit`, `shed_in_flight`, `shed_queue`, `shed_active_tenants`,
//! `shed_min_rtt_seconds`, `shed_gradient`, `shed_probing`; counters `shed_admitted_total{tier}`
//! and `shed_rejected_total{tier, reason, tenant_bucket}`. A tenant is never a label (its key
//! may be an API key, and there may be millions): `tenant_bucket` is one of 16 buckets of its
//! hash, enough to see whether one tenant is being shed or all are.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::limit::Observed;
use crate::rejection::Reason;
use crate::tier::Tier;

/// How many hash buckets the tenants are counted in.
pub const TENANT_BUCKETS: u64 = 16;

pub fn tenant_bucket(tenant: &str) -> String {
    // SipHash with fixed keys: the same bucket for the same tenant in every process.
    let mut h = DefaultHasher::new();
    tenant.hash(&mut h);
    (h.finish() % TENANT_BUCKETS).to_string()
}

pub struct Levels {
    pub limit: usize,
    pub in_flight: usize,
    pub queued: usize,
    pub active_tenants: usize,
    pub observed: Observed,
}

pub fn levels(l: &Levels) {
    metrics::gauge!("shed_limit").set(l.limit as f64);
    metrics::gauge!("shed_in_flight").set(l.in_flight as f64);
    metrics::gauge!("shed_queue").set(l.queued as f64);
    metrics::gauge!("shed_active_tenants").set(l.active_tenants as f64);
    if let Some(m) = l.observed.min_rtt {
        metrics::gauge!("shed_min_rtt_seconds").set(m.as_secs_f64());
    }
    metrics::gauge!("shed_gradient").set(l.observed.gradient);
    metrics::gauge!("shed_probing").set(f64::from(u8::from(l.observed.probing)));
}

pub fn admitted(tier: Tier) {
    metrics::counter!("shed_admitted_total", "tier" => tier.name()).increment(1);
}

pub fn rejected(tier: Tier, tenant: &str, reason: Reason) {
    metrics::counter!(
        "shed_rejected_total",
        "tier" => tier.name(),
        "reason" => reason.name(),
        "tenant_bucket" => tenant_bucket(tenant),
    )
    .increment(1);
}
