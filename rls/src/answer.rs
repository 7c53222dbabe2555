//! The answer step: the response to `ShouldRateLimit`, as the peer answers: one status per descriptor (its rule's
//! limit, what is left, 0 when over, the time to reset; `unlimited` answers the largest
//! remaining), the total OVER_LIMIT when a descriptor that enforces is over, or when every
//! `quota_mode` one is; a rule's `shadow_mode` answers OK in its status, the global SHADOW_MODE
//! keeps each status and answers OK in the total (each item carries its [`Mode`], decided
//! once when it was matched: this step only reads it). Also the peer's counters per rule, the
//! headers, and the dynamic metadata.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use ratelimit_client::Source;

use crate::headers::{self, Part};
use crate::item::{Item, Mode};
use crate::metadata;
use crate::metrics::RuleCounts;
use crate::steps::Steps;

impl Steps<'_> {
    pub(crate) fn answer(
        &self,
        req: &RateLimitRequest,
        items: &[Item],
        unlimited: &[usize],
        in_quota: &[bool],
    ) -> RateLimitResponse {
        let n = req.descriptors.len();
        let mut statuses: Vec<DescriptorStatus> = (0..n)
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            })
            .collect();
        for i in unlimited {
            if let Some(s) = statuses.get_mut(*i) {
                s.limit_remaining = u32::MAX;
            }
        }
        let mut failed = false;
        let mut parts = Vec::new();
        for item in items {
            let rule = &item.rule;
            let current = PbLimit {
                name: rule.name.clone(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit_proto(),
            };
            self.count(&item.stats_key, rule, &self.counts(item));
            let Mode { shadow, quota, .. } = item.mode;
            for i in &item.indexes {
                if let Some(status) = statuses.get_mut(*i) {
                    status.current_limit = Some(current.clone());
                }
            }
            // Not asked: another descriptor was denied here without a store call.
            let Some(o) = item.outcome else { continue };
            let denied = !o.admitted && item.enforced();
            if denied && !shadow && !quota {
                failed = true;
            }
            let reset_ms = if denied {
                o.reset_after_ms.max(o.retry_after_ms.unwrap_or(0))
            } else {
                o.reset_after_ms
            };
            for i in &item.indexes {
                let Some(status) = statuses.get_mut(*i) else {
                    continue;
                };
                status.code = if denied && !shadow {
                    Code::OverLimit as i32
                } else {
                    Code::Ok as i32
                };
                status.limit_remaining = if denied {
                    0
                } else {
                    u32::try_from(o.remaining).unwrap_or(u32::MAX)
                };
                status.duration_until_reset = Some(PbDuration {
                    seconds: i64::try_from(reset_ms.div_ceil(1000)).unwrap_or(i64::MAX),
                    nanos: 0,
                });
            }
            // A settle's response is gone: it adds nothing to the headers.
            if let Some(p) = rule.policy().filter(|_| !item.is_settle()) {
                parts.push(Part {
                    name: if rule.name.is_empty() {
                        item.stats_key.clone()
                    } else {
                        rule.name.clone()
                    },
                    requests_per_unit: u64::from(rule.requests_per_unit),
                    limit: p.limit,
                    window_ms: p.window_ms,
                    burst: p.burst,
                    admitted: o.admitted,
                    hits: item.cost(),
                    remaining: o.remaining,
                    retry_after_ms: o.retry_after_ms,
                    reset_after_ms: reset_ms,
                });
            }
        }
        // The store did not answer for some descriptor (its class decided): the peer's
        // redis_error, so that an outage shows where operators look for it.
        if items.iter().any(|i| {
            i.outcome
                .is_some_and(|o| matches!(o.source, Some(Source::Fallback(_))))
        }) {
            self.metrics
                .service("call_should_rate_limit_redis_error", 1);
            self.metrics.service("store_fallback_requests", 1);
        }
        let over_limit = |i: usize| {
            statuses
                .get(i)
                .is_some_and(|s| s.code == Code::OverLimit as i32)
        };
        let quota = |i: &usize| in_quota.get(*i).copied().unwrap_or(false);
        let quotas = (0..n).filter(quota).count();
        let quotas_over = (0..n).filter(|i| quota(i) && over_limit(*i)).count();
        let mut over = failed || (quotas > 0 && quotas == quotas_over);
        // A request is over only through a denied item, and SHADOW_MODE is on every item.
        if over && items.iter().any(|i| i.mode.global_shadow) {
            over = false;
            self.metrics.service("global_shadow_mode", 1);
        }
        let retry = items
            .iter()
            .filter(|i| !i.mode.shadow && !i.mode.quota && i.enforced())
            .filter_map(|i| i.outcome.filter(|o| !o.admitted))
            .filter_map(|o| o.retry_after_ms)
            .max();
        let response_headers_to_add = headers::response_headers(self.settings, &parts, over, retry)
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                ..HeaderValue::default()
            })
            .collect();
        let dynamic_metadata = self.settings.response_dynamic_metadata.then(|| {
            let passed: Vec<_> = (0..n)
                .filter(|i| !over_limit(*i) && !unlimited.contains(i))
                .filter_map(|i| {
                    items
                        .iter()
                        .find(|it| it.indexes.contains(&i))
                        .and_then(|it| it.rule.metadata.as_deref())
                })
                .collect();
            metadata::response(req, &passed)
        });
        RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            dynamic_metadata,
            ..RateLimitResponse::default()
        }
    }

    /// The peer's counters for one item: every hit is total; a denied one is over the limit
    /// (and shadow, and answered locally, as it was); an admitted one is within the limit, and
    /// near it for the part above NEAR_LIMIT_RATIO of the limit.
    fn counts(&self, item: &Item) -> RuleCounts {
        if item.is_settle() {
            // Counted by `settle` as charged, given back, journaled or dropped.
            return RuleCounts::default();
        }
        let h = item.cost();
        let mut c = RuleCounts {
            total_hits: h,
            ..RuleCounts::default()
        };
        let Some(o) = item.outcome else { return c };
        if matches!(o.source, Some(Source::Fallback(_))) {
            c.fallback = 1;
        }
        if !o.admitted && item.enforced() {
            c.over_limit = h;
            if o.local_cache {
                c.over_limit_with_local_cache = h;
            }
            if item.mode.shadow {
                c.shadow_mode = h;
            }
        } else if o.admitted {
            c.within_limit = h;
            let capacity = item.rule.capacity();
            let near = (capacity as f64 * self.settings.near_limit_ratio).floor() as u64;
            let used = capacity.saturating_sub(o.remaining);
            if used > near {
                c.near_limit = h.min(used - near);
            }
        }
        c
    }
}
