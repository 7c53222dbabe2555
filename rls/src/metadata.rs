//! Dynamic metadata in the response (`RESPONSE_DYNAMIC_METADATA=true`), as the peer writes it:
//! `domain`, `descriptors` (each with `entries` as `key=value`, its `limit` override and
//! `hitsAddend` when set), the request's `hitsAddend` when not 0, and `metadata`: the `metadata`
//! blocks of the config's descriptors this request passed, merged (the first one to set a key
//! keeps it; two mappings under one key are merged the same way).

use std::collections::BTreeMap;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, Struct, Value};
use yaml_rust2::Yaml;

/// A config's `metadata` block as a protobuf Struct (`None` when empty). Keys are written out
/// as text, as the peer's decoder does; an alias or a bad value is refused.
pub fn from_yaml(yaml: &Yaml) -> Result<Option<Struct>, String> {
    match yaml {
        Yaml::Hash(h) if h.is_empty() => Ok(None),
        Yaml::Hash(_) => match value(yaml)?.kind {
            Some(Kind::StructValue(s)) => Ok(Some(s)),
            _ => Err("not a mapping".into()),
        },
        _ => Err("metadata must be a mapping".into()),
    }
}

fn value(yaml: &Yaml) -> Result<Value, String> {
    let kind = match yaml {
        Yaml::String(s) => Kind::StringValue(s.clone()),
        Yaml::Integer(i) => Kind::NumberValue(*i as f64),
        Yaml::Real(r) => {
            Kind::NumberValue(r.parse().map_err(|_| format!("'{r}' is not a number"))?)
        }
        Yaml::Boolean(b) => Kind::BoolValue(*b),
        Yaml::Null => Kind::NullValue(0),
        Yaml::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(value).collect::<Result<_, _>>()?,
        }),
        Yaml::Hash(h) => {
            let mut fields = BTreeMap::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Real(r) => r.clone(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => return Err(format!("unsupported key {other:?}")),
                };
                fields.insert(key, value(v)?);
            }
            Kind::StructValue(Struct {
                fields: fields.into_iter().collect(),
            })
        }
        other => return Err(format!("unsupported value {other:?}")),
    };
    Ok(Value { kind: Some(kind) })
}

fn text(s: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

/// The response's dynamic metadata, `passed`: the metadata of the descriptors that passed.
pub fn response(req: &RateLimitRequest, passed: &[&Struct]) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_string(), text(req.domain.clone()));
    let descriptors = req
        .descriptors
        .iter()
        .map(|d| {
            let mut f = std::collections::HashMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| text(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert(
                "entries".to_string(),
                Value {
                    kind: Some(Kind::ListValue(ListValue { values: entries })),
                },
            );
            if let Some(l) = &d.limit {
                f.insert("limit".to_string(), text(format!("{l:?}")));
            }
            if let Some(h) = &d.hits_addend {
                f.insert("hitsAddend".to_string(), number(h.value as f64));
            }
            Value {
                kind: Some(Kind::StructValue(Struct { fields: f })),
            }
        })
        .collect();
    fields.insert(
        "descriptors".to_string(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_string(), number(f64::from(req.hits_addend)));
    }
    let mut merged = Struct::default();
    for m in passed {
        merge(&mut merged, m);
    }
    if !merged.fields.is_empty() {
        fields.insert(
            "metadata".to_string(),
            Value {
                kind: Some(Kind::StructValue(merged)),
            },
        );
    }
    Struct { fields }
}

/// `src` into `dest`: a new key is added; two mappings under one key are merged; any other
/// value already there stays.
fn merge(dest: &mut Struct, src: &Struct) {
    for (k, v) in &src.fields {
        match dest.fields.get_mut(k) {
            None => {
                dest.fields.insert(k.clone(), v.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(d)),
            }) => {
                if let Some(Kind::StructValue(s)) = &v.kind {
                    merge(d, s);
                }
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yaml_rust2::YamlLoader;

    fn yaml(text: &str) -> Yaml {
        YamlLoader::load_from_str(text).unwrap().remove(0)
    }

    #[test]
    fn metadata_blocks_are_structs_and_merge_first_wins() {
        let a = from_yaml(&yaml("service_with_quota: {name: service_1}\nn: 1\n"))
            .unwrap()
            .unwrap();
        let b = from_yaml(&yaml(
            "service_with_quota: {name: x, other: 2}\nflag: true\n",
        ))
        .unwrap()
        .unwrap();
        let req = RateLimitRequest {
            domain: "d".into(),
            ..RateLimitRequest::default()
        };
        let out = response(&req, &[&a, &b]);
        let Some(Kind::StructValue(m)) = &out.fields["metadata"].kind else {
            panic!("no metadata")
        };
        let Some(Kind::StructValue(s)) = &m.fields["service_with_quota"].kind else {
            panic!("not merged")
        };
        assert_eq!(s.fields["name"], text("service_1"));
        assert_eq!(s.fields["other"], number(2.0));
        assert_eq!(m.fields["flag"].kind, Some(Kind::BoolValue(true)));
        assert!(from_yaml(&yaml("{}")).unwrap().is_none());
        assert!(from_yaml(&yaml("[1]")).is_err());
    }
}
