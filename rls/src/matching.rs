//! The first step of a `ShouldRateLimit` request: its descriptors matched to rules, as
//! [`Item`]s. Each descriptor's `hits_addend` is read here once into [`Hits`] (a check, or a
//! settle), and its shadow and quota modes once into [`Mode`] (and each descriptor's quota
//! mode, which the answer counts, once into [`Descriptors::in_quota`]).

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::config::{descriptor_key, Config, Matched, Rule, Unit, HOLDER_KEY, SETTLE_KEY};
use crate::item::{Hits, Item, Mode};
use crate::settings::Settings;

/// A request's descriptors as the later steps take them.
pub(crate) struct Descriptors {
    /// The limited ones, a key once (see [`Item`]).
    pub(crate) items: Vec<Item>,
    /// The indexes of the descriptors whose rule is `unlimited` (answered with the largest
    /// remaining, as the peer answers).
    pub(crate) unlimited: Vec<usize>,
    /// Per descriptor, whether it is in quota mode: its rule's `quota_mode`, or QUOTA_MODE on
    /// every descriptor but the unlimited ones (those without a rule too, as the peer counts
    /// them).
    pub(crate) in_quota: Vec<bool>,
}

/// The limited descriptors: each matched to its rule (the descriptor's own `limit` override
/// first), rules named in another matched rule's `replaces` dropped, unlimited ones set apart.
/// A descriptor is a settle when it carries the `rls_settle` entry (left out of matching and
/// of the key), gives back (`is_negative_hits`), or charges a `settle: true` rule.
pub(crate) fn descriptors(
    config: &Config,
    settings: &Settings,
    req: &RateLimitRequest,
) -> Descriptors {
    let mut matched: Vec<Item> = Vec::new();
    for (index, d) in req.descriptors.iter().enumerate() {
        let marked = d.entries.iter().any(|e| e.key == SETTLE_KEY);
        let holder = d.entries.iter().find(|e| e.key == HOLDER_KEY);
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .filter(|e| e.key != SETTLE_KEY && e.key != HOLDER_KEY)
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        if entries.is_empty() {
            continue;
        }
        let own_key = descriptor_key(&req.domain, &entries);
        let found = match &d.limit {
            Some(o) => Unit::from_proto(o.unit).map(|unit| Matched {
                rule: Arc::new(Rule::from_override(
                    own_key.clone(),
                    o.requests_per_unit,
                    unit,
                )),
                stats_key: own_key.clone(),
                shared: Vec::new(),
            }),
            None => config.rule_for(&req.domain, &entries),
        };
        let Some(Matched {
            rule,
            stats_key,
            shared,
        }) = found
        else {
            continue;
        };
        let kind = match (rule.policy(), rule.concurrency) {
            (Some(p), _) => Some(p.algorithm.name()),
            (None, Some(_)) => Some("CONCURRENCY"),
            (None, None) => None,
        };
        let key = kind.map_or(String::new(), |kind| {
            store_key(settings, &req.domain, &entries, &shared, kind)
        });
        matched.push(Item {
            indexes: vec![index],
            key,
            stats_key,
            hits: hits(req, d, marked, rule.settle),
            mode: Mode {
                shadow: rule.shadow_mode,
                quota: rule.quota_mode || settings.quota_mode,
                global_shadow: settings.shadow_mode,
            },
            holder: holder.map(|e| e.value.clone()),
            rule,
            outcome: None,
        });
    }
    let replaced: HashSet<String> = matched
        .iter()
        .flat_map(|i| i.rule.replaces.iter().cloned())
        .collect();
    let mut items: Vec<Item> = Vec::new();
    let mut unlimited = Vec::new();
    for item in matched {
        let rule = &item.rule;
        if rule.unlimited {
            unlimited.extend(item.indexes);
            continue;
        }
        if !rule.name.is_empty() && replaced.contains(&rule.name) {
            continue;
        }
        if !rule.is_limited() {
            continue;
        }
        let mut left = Some(item);
        for same in items.iter_mut() {
            left = match left {
                Some(item) => same.absorb(item),
                None => break,
            };
        }
        items.extend(left);
    }
    let in_quota = (0..req.descriptors.len())
        .map(|i| {
            let everywhere = settings.quota_mode && !unlimited.contains(&i);
            everywhere
                || items
                    .iter()
                    .any(|it| it.mode.quota && it.indexes.contains(&i))
        })
        .collect();
    Descriptors {
        items,
        unlimited,
        in_quota,
    }
}

/// What one descriptor's hits ask: its own `hits_addend` when set (0 checks without charging),
/// else the request's, where 0 means 1 (as the peer reads both); a settle (see
/// [`descriptors`]) by that many tokens, negative when it gives back.
fn hits(req: &RateLimitRequest, d: &RateLimitDescriptor, marked: bool, settle_rule: bool) -> Hits {
    let n = match &d.hits_addend {
        Some(v) => v.value,
        None => u64::from(req.hits_addend.max(1)),
    };
    if !(marked || d.is_negative_hits || (settle_rule && n > 0)) {
        return Hits::Check(n);
    }
    let size = i64::try_from(n).unwrap_or(i64::MAX);
    Hits::Settle(if d.is_negative_hits { -size } else { size })
}

/// `<prefix>rls:{<domain>}:<key>_<value>.<key>_<value>:<ALGORITHM>` (`CONCURRENCY` for a
/// concurrency rule): the domain is the hash tag, so every descriptor of a request is on one
/// Cluster slot (one `RL.ALL`); the algorithm is in the key so that changing a rule's
/// algorithm starts a new key instead of meeting the old one's type. A `share_threshold`
/// entry's value is its pattern: every value the pattern matches shares the one counter.
fn store_key(
    settings: &Settings,
    domain: &str,
    entries: &[(&str, &str)],
    shared: &[Option<String>],
    kind: &str,
) -> String {
    let mut key = format!("{}rls:{{{domain}}}:", settings.cache_key_prefix);
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            key.push('.');
        }
        let v = shared.get(i).and_then(Option::as_deref).unwrap_or(v);
        key.push_str(k);
        if !v.is_empty() {
            key.push('_');
            key.push_str(v);
        }
    }
    key.push(':');
    key.push_str(kind);
    key
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::google::protobuf::UInt64Value;

    use super::*;

    /// (the request's hits_addend, the descriptor's, is_negative_hits, marked `rls_settle`,
    /// a `settle: true` rule) → what the descriptor asks.
    #[test]
    fn hits_addend_is_read_once_into_a_check_or_a_settle() {
        let cases = [
            (0, None, false, false, false, Hits::Check(1)),
            (3, None, false, false, false, Hits::Check(3)),
            (3, Some(0), false, false, false, Hits::Check(0)),
            (3, Some(7), false, false, false, Hits::Check(7)),
            (0, Some(7), false, true, false, Hits::Settle(7)),
            (0, Some(7), true, false, false, Hits::Settle(-7)),
            (0, Some(0), false, false, true, Hits::Check(0)),
            (0, Some(7), false, false, true, Hits::Settle(7)),
            (
                0,
                Some(u64::MAX),
                true,
                false,
                false,
                Hits::Settle(-i64::MAX),
            ),
        ];
        for (request, own, negative, marked, settle_rule, want) in cases {
            let req = RateLimitRequest {
                hits_addend: request,
                ..RateLimitRequest::default()
            };
            let d = RateLimitDescriptor {
                hits_addend: own.map(|value| UInt64Value { value }),
                is_negative_hits: negative,
                ..RateLimitDescriptor::default()
            };
            assert_eq!(
                hits(&req, &d, marked, settle_rule),
                want,
                "{request} {own:?} {negative} {marked} {settle_rule}"
            );
        }
    }
}
