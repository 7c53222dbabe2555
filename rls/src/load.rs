//! YAML files to a [`Config`], with the peer's checks (unknown field, empty or duplicate domain,
//! empty or duplicate descriptor key, bad unit, a unit with `unlimited`, an empty `replaces` or one
//! naming its own rule, values that are neither strings, integers nor booleans) and ours on the
//! extensions. Every error names the file and the entry: `file: descriptors[0].descriptors[1]
//! (key 'path'): invalid rate limit unit 'fortnight'`.

use std::sync::Arc;

use ratelimit_client::{Algorithm, Class};
use ratelimit_core::algo::concurrency::MAX_HOLDERS;
use ratelimit_core::algo::{listed, MAX_WINDOW_MS};
use yaml_rust2::yaml::Hash;
use yaml_rust2::{Yaml, YamlLoader};

use crate::config::{Concurrency, Config, Node, Options, Rule, Unit, DEFAULT_SLOT_TTL_MS};
use crate::go_duration;
use crate::metadata;
use crate::wildcard::Wildcard;
use crate::yaml_limits::{self, YamlLimits};

/// The fields the peer knows, then ours.
const FIELDS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "algorithm",
    "burst",
    "class",
    "lease",
    "settle",
    "concurrency",
    "ttl",
];

/// Why a set of files was refused; the text names the file and the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Builds one config from `(file name, contents)` pairs, in order. `merge` is the peer's
/// `MERGE_DOMAIN_CONFIG`: a domain in two files is merged instead of refused. Each file's depth
/// and aliases are checked against `limits` before it is parsed into a tree.
pub fn load(
    files: &[(String, String)],
    merge: bool,
    limits: YamlLimits,
) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    for (name, text) in files {
        yaml_limits::check(text, limits).map_err(|e| ConfigError(format!("{name}: {e}")))?;
        load_file(&mut config, name, text, merge)?;
        config.files.push(name.clone());
    }
    Ok(config)
}

fn load_file(config: &mut Config, file: &str, text: &str, merge: bool) -> Result<(), ConfigError> {
    let err = |at: &str, what: String| {
        ConfigError(if at.is_empty() {
            format!("{file}: {what}")
        } else {
            format!("{file}: {at}: {what}")
        })
    };
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| err("", format!("error loading config file: {e}")))?;
    let root = match docs.into_iter().next().map(merge_keys) {
        Some(Yaml::Hash(h)) => h,
        Some(Yaml::Null) | None => {
            return Err(err("", "config file cannot have empty domain".into()))
        }
        Some(_) => return Err(err("", "the file is not a mapping".into())),
    };
    check_fields(&root, "", &err)?;
    let domain = match root.get(&Yaml::String("domain".into())) {
        None | Some(Yaml::Null) => String::new(),
        Some(v) => scalar(v).ok_or_else(|| err("domain", "must be a string".into()))?,
    };
    if domain.is_empty() {
        return Err(err("", "config file cannot have empty domain".into()));
    }
    if config.domains.contains_key(&domain) && !merge {
        return Err(err(
            "",
            format!("duplicate domain '{domain}' in config file"),
        ));
    }
    let descriptors = list(&root, "descriptors", "", &err)?;
    let node = config.domains.entry(domain.clone()).or_default();
    load_level(node, &descriptors, &domain, "", &err)
}

type Err<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

/// Every key a string the format knows; every value a string, integer, boolean, list of
/// mappings or mapping (a float or anything else is refused, as the peer refuses it).
fn check_fields(map: &Hash, at: &str, err: &Err<'_>) -> Result<(), ConfigError> {
    for (k, v) in map {
        let Yaml::String(name) = k else {
            return Err(err(
                at,
                format!("config error, key is not of type string: {}", shown(k)),
            ));
        };
        if !FIELDS.contains(&name.as_str()) {
            return Err(err(at, format!("config error, unknown key '{name}'")));
        }
        let here = if at.is_empty() {
            name.clone()
        } else {
            format!("{at}.{name}")
        };
        if name == "metadata" {
            // Free-form, as the peer leaves it: checked when converted (`metadata.rs`).
            continue;
        }
        match v {
            Yaml::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let Yaml::Hash(h) = item else {
                        return Err(err(
                            &format!("{here}[{i}]"),
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                shown(item)
                            ),
                        ));
                    };
                    check_fields(h, &format!("{here}[{i}]"), err)?;
                }
            }
            Yaml::Hash(h) => check_fields(h, &here, err)?,
            Yaml::String(_) | Yaml::Integer(_) | Yaml::Boolean(_) | Yaml::Null => {}
            other => {
                return Err(err(
                    &here,
                    format!("config error, a value of unsupported type: {other:?}"),
                ))
            }
        }
    }
    Ok(())
}

fn load_level(
    node: &mut Node,
    descriptors: &[Hash],
    parent: &str,
    at: &str,
    err: &Err<'_>,
) -> Result<(), ConfigError> {
    for (i, d) in descriptors.iter().enumerate() {
        let key = text(d, "key").unwrap_or_default();
        let here = format!(
            "{}descriptors[{i}]{}",
            if at.is_empty() {
                String::new()
            } else {
                format!("{at}.")
            },
            if key.is_empty() {
                String::new()
            } else {
                format!(" (key '{key}')")
            }
        );
        let field = |name: &str| -> Result<String, ConfigError> {
            match d.get(&Yaml::String(name.into())) {
                None | Some(Yaml::Null) => Ok(String::new()),
                Some(v) => {
                    scalar(v).ok_or_else(|| err(&here, format!("'{name}' must be a string")))
                }
            }
        };
        let key = field("key")?;
        if key.is_empty() {
            return Err(err(&here, "descriptor has empty key".into()));
        }
        let value = field("value")?;
        let composite = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let full = format!("{parent}.{composite}");
        if node.children.contains_key(&composite) {
            return Err(err(
                &here,
                format!("duplicate descriptor composite key '{full}'"),
            ));
        }
        let flags = Flags {
            shadow_mode: flag(d, "shadow_mode", &here, err)?,
            quota_mode: flag(d, "quota_mode", &here, err)?,
            detailed_metric: flag(d, "detailed_metric", &here, err)?,
        };
        let share_threshold = flag(d, "share_threshold", &here, err)?;
        let wildcard = Wildcard::new(&composite);
        if share_threshold && wildcard.is_none() {
            return Err(err(
                &here,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), \
                     but found key '{composite}'"
                ),
            ));
        }
        let metadata = match d.get(&Yaml::String("metadata".into())) {
            None | Some(Yaml::Null) => None,
            Some(m) => metadata::from_yaml(m)
                .map_err(|e| err(&here, format!("error parsing metadata: {e}")))?
                .map(Arc::new),
        };
        let rule = match d.get(&Yaml::String("rate_limit".into())) {
            None | Some(Yaml::Null) => None,
            Some(Yaml::Hash(rl)) => Some(Arc::new(rule(
                rl,
                &full,
                flags,
                metadata,
                &format!("{here}.rate_limit"),
                err,
            )?)),
            Some(_) => return Err(err(&here, "'rate_limit' must be a mapping".into())),
        };
        let mut child = Node {
            rule,
            value_to_metric: flag(d, "value_to_metric", &here, err)?,
            share_threshold,
            ..Node::default()
        };
        let nested = list(d, "descriptors", &here, err)?;
        load_level(&mut child, &nested, &full, &here, err)?;
        if let Some(w) = wildcard {
            node.wildcards.push(w);
        }
        node.children.insert(composite, child);
    }
    Ok(())
}

/// A descriptor's switches that its rule carries.
#[derive(Clone, Copy)]
struct Flags {
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
}

fn rule(
    rl: &Hash,
    full: &str,
    flags: Flags,
    metadata: Option<Arc<envoy_types::pb::google::protobuf::Struct>>,
    at: &str,
    err: &Err<'_>,
) -> Result<Rule, ConfigError> {
    let slots = concurrency(rl, at, err)?;
    let unlimited = flag(rl, "unlimited", at, err)?;
    let unit_text = text(rl, "unit").unwrap_or_default();
    let unit = Unit::parse(&unit_text);
    if unlimited && unit.is_some() {
        return Err(err(
            at,
            "should not specify rate limit unit when unlimited".into(),
        ));
    }
    if !unlimited && unit.is_none() && slots.is_none() {
        return Err(err(at, format!("invalid rate limit unit '{unit_text}'")));
    }
    let requests_per_unit = match rl.get(&Yaml::String("requests_per_unit".into())) {
        // A concurrency rule's N, as its statuses show it.
        None | Some(Yaml::Null) => slots.map_or(0, |(n, _)| n as u32),
        Some(Yaml::Integer(n)) => u32::try_from(*n).map_err(|_| {
            err(
                at,
                format!("requests_per_unit {n} is not between 0 and 4294967295"),
            )
        })?,
        Some(_) => return Err(err(at, "requests_per_unit must be an integer".into())),
    };
    let name = text(rl, "name").unwrap_or_default();
    let mut replaces = Vec::new();
    for r in list(rl, "replaces", at, err)? {
        let n = text(&r, "name").unwrap_or_default();
        if n.is_empty() {
            return Err(err(at, "should not have an empty replaces entry".into()));
        }
        if n == name {
            return Err(err(
                at,
                "replaces should not contain name of same descriptor".into(),
            ));
        }
        replaces.push(n);
    }
    let options = options(rl, at, err)?;
    let settle = flag(rl, "settle", at, err)?;
    let unit = unit.unwrap_or(Unit::Second);
    let stats_key = full.to_string();
    let concurrency = slots.map(|(limit, ttl_ms)| Concurrency {
        limit,
        ttl_ms,
        class: options.class,
    });
    let rated = !unlimited && concurrency.is_none();
    Ok(Rule {
        limit: rated.then(|| options.limit(&stats_key, requests_per_unit, unit)),
        concurrency,
        stats_key,
        name,
        replaces,
        unlimited,
        unit,
        requests_per_unit,
        shadow_mode: flags.shadow_mode,
        quota_mode: flags.quota_mode,
        detailed_metric: flags.detailed_metric,
        metadata,
        settle,
    })
}

/// `concurrency: N` and its `ttl` (a Go duration, [`DEFAULT_SLOT_TTL_MS`] unset): N and the
/// TTL in ms. What bounds a rate has no meaning on it and is refused by name.
fn concurrency(rl: &Hash, at: &str, err: &Err<'_>) -> Result<Option<(u64, u64)>, ConfigError> {
    let has = |name: &str| !matches!(rl.get(&Yaml::String(name.into())), None | Some(Yaml::Null));
    if !has("concurrency") {
        if has("ttl") {
            return Err(err(at, "ttl is for concurrency rules only".into()));
        }
        return Ok(None);
    }
    let n = match rl.get(&Yaml::String("concurrency".into())) {
        Some(Yaml::Integer(n)) => u64::try_from(*n)
            .ok()
            .filter(|n| (1..=MAX_HOLDERS).contains(n)),
        _ => None,
    }
    .ok_or_else(|| {
        err(
            at,
            format!("concurrency must be an integer from 1 to {MAX_HOLDERS}"),
        )
    })?;
    for other in [
        "unit",
        "requests_per_unit",
        "unlimited",
        "algorithm",
        "burst",
        "lease",
        "settle",
    ] {
        if has(other) {
            return Err(err(
                at,
                format!(
                    "'{other}' does not go with concurrency (a concurrency rule bounds the \
                     requests in flight, not the requests per unit)"
                ),
            ));
        }
    }
    let ttl_ms = match rl.get(&Yaml::String("ttl".into())) {
        None | Some(Yaml::Null) => DEFAULT_SLOT_TTL_MS,
        Some(Yaml::String(t)) => go_duration::parse(t)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
            .filter(|ms| (1..=MAX_WINDOW_MS).contains(ms))
            .ok_or_else(|| {
                err(
                    at,
                    format!("ttl '{t}' is not a duration from 1ms (a Go duration such as 30s)"),
                )
            })?,
        Some(_) => return Err(err(at, "ttl must be a duration such as 30s or 5m".into())),
    };
    Ok(Some((n, ttl_ms)))
}

/// `algorithm`, `burst`, `class`, `lease`: our extensions.
fn options(rl: &Hash, at: &str, err: &Err<'_>) -> Result<Options, ConfigError> {
    let mut o = Options::default();
    if let Some(a) = text(rl, "algorithm") {
        // The words are the registry's limiter ids; the client's enum has each limiter.
        o.algorithm = listed::limiter_by_id(&a)
            .and_then(|l| Algorithm::parse(l.word))
            .ok_or_else(|| {
                let ids = listed::limiter_list(|l| l.id, |_| true, ", ");
                err(at, format!("unknown algorithm '{a}' ({ids})"))
            })?;
    }
    if let Some(c) = text(rl, "class") {
        o.class = match c.as_str() {
            "security" => Class::Security,
            "contract" => Class::Contract,
            "billing" => Class::Billing,
            _ => {
                return Err(err(
                    at,
                    format!("unknown class '{c}' (security, contract, billing)"),
                ))
            }
        };
    }
    o.burst = positive(rl, "burst", at, err)?;
    o.lease = positive(rl, "lease", at, err)?;
    if o.burst.is_some() && !o.algorithm.has_burst() && o.lease.is_none() {
        return Err(err(
            at,
            format!(
                "burst is for the {} algorithms only",
                listed::limiter_list(|l| l.id, |l| l.burst, " and ")
            ),
        ));
    }
    if o.lease.is_some() && !matches!(o.algorithm, Algorithm::TokenBucket) {
        return Err(err(
            at,
            "lease needs algorithm token_bucket (leases are taken from a token bucket)".into(),
        ));
    }
    Ok(o)
}

fn positive(rl: &Hash, name: &str, at: &str, err: &Err<'_>) -> Result<Option<u64>, ConfigError> {
    match rl.get(&Yaml::String(name.into())) {
        None | Some(Yaml::Null) => Ok(None),
        Some(Yaml::Integer(n)) if *n > 0 => Ok(u64::try_from(*n).ok()),
        Some(_) => Err(err(at, format!("{name} must be a positive integer"))),
    }
}

fn flag(map: &Hash, name: &str, at: &str, err: &Err<'_>) -> Result<bool, ConfigError> {
    match map.get(&Yaml::String(name.into())) {
        None | Some(Yaml::Null) => Ok(false),
        Some(Yaml::Boolean(b)) => Ok(*b),
        Some(_) => Err(err(at, format!("{name} must be true or false"))),
    }
}

fn list(map: &Hash, name: &str, at: &str, err: &Err<'_>) -> Result<Vec<Hash>, ConfigError> {
    match map.get(&Yaml::String(name.into())) {
        None | Some(Yaml::Null) => Ok(Vec::new()),
        Some(Yaml::Array(items)) => Ok(items
            .iter()
            .filter_map(|i| match i {
                Yaml::Hash(h) => Some(h.clone()),
                _ => None,
            })
            .collect()),
        Some(_) => Err(err(at, format!("'{name}' must be a list"))),
    }
}

/// YAML merge keys (`<<: *anchor`, or a list of anchors) written out: each merged mapping's
/// entries join the mapping that names it unless it has that key itself (an earlier mapping of
/// a list wins over a later one), as the peer's YAML decoder reads them. Aliases themselves are
/// resolved by the parser.
fn merge_keys(doc: Yaml) -> Yaml {
    match doc {
        Yaml::Array(items) => Yaml::Array(items.into_iter().map(merge_keys).collect()),
        Yaml::Hash(map) => {
            let merge = Yaml::String("<<".into());
            let mut out = Hash::new();
            let mut merged = Vec::new();
            for (k, v) in map {
                if k == merge {
                    match v {
                        Yaml::Array(list) => merged.extend(list),
                        other => merged.push(other),
                    }
                } else {
                    out.insert(k, merge_keys(v));
                }
            }
            for source in merged {
                let Yaml::Hash(source) = merge_keys(source) else {
                    // Not a mapping: left for the field check to refuse by name.
                    out.insert(merge.clone(), Yaml::Null);
                    continue;
                };
                for (k, v) in source {
                    out.entry(k).or_insert(v);
                }
            }
            Yaml::Hash(out)
        }
        other => other,
    }
}

/// A scalar as text: strings as they are, integers and booleans written out (as the peer's YAML
/// decoder reads them into its string fields).
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A value as the peer's error messages print it: a scalar as written, anything else debugged.
fn shown(v: &Yaml) -> String {
    match v {
        Yaml::Real(r) => r.clone(),
        other => scalar(other).unwrap_or_else(|| format!("{other:?}")),
    }
}

fn text(map: &Hash, name: &str) -> Option<String> {
    map.get(&Yaml::String(name.into())).and_then(scalar)
}

#[cfg(test)]
mod tests;
