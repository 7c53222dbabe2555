//! `POST /json`, as the peer serves it: a `RateLimitRequest` in protobuf's JSON mapping
//! (`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`, field names
//! in camelCase or as in the .proto), decided as over gRPC, answered with the response in the
//! same mapping: 200 when OK, 429 when over the limit.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

use crate::config::Unit;
use crate::reply::Reply;
use crate::service::{Refusal, Service};

pub async fn answer(service: &Service, body: &[u8]) -> Reply {
    let request = match serde_json::from_slice::<Value>(body)
        .map_err(|e| e.to_string())
        .and_then(|v| request(&v))
    {
        Ok(r) => r,
        Err(e) => return Reply::text("400 Bad Request", format!("bad request: {e}")),
    };
    match service.should_rate_limit(&request).await {
        Ok(r) => Reply {
            status: if r.overall_code == Code::OverLimit as i32 {
                "429 Too Many Requests"
            } else {
                "200 OK"
            },
            kind: "application/json",
            body: response(&r).to_string(),
        },
        Err(Refusal::BadRequest(m)) => Reply::text("400 Bad Request", m),
        Err(Refusal::NoConfig) => Reply::text(
            "500 Internal Server Error",
            "no rate limit configuration loaded",
        ),
        Err(Refusal::Store(e)) => Reply::text("500 Internal Server Error", e.to_string()),
    }
}

/// A field by its JSON name or its .proto name.
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

fn number(v: Option<&Value>) -> Result<Option<u64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or(format!("{n}: not a count")),
        // 64-bit integers are strings in protobuf's JSON mapping.
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| format!("{s}: not a count")),
        Some(other) => Err(format!("{other}: not a count")),
    }
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

fn request(v: &Value) -> Result<RateLimitRequest, String> {
    let mut descriptors = Vec::new();
    for d in field(v, "descriptors", "descriptors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let entries = field(d, "entries", "entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| Entry {
                key: text(e.get("key")),
                value: text(e.get("value")),
            })
            .collect();
        let limit = match field(d, "limit", "limit") {
            None | Some(Value::Null) => None,
            Some(l) => {
                let rpu = number(field(l, "requestsPerUnit", "requests_per_unit"))?.unwrap_or(0);
                let unit = match field(l, "unit", "unit") {
                    Some(Value::String(u)) => Unit::parse(u).map_or(0, Unit::proto),
                    Some(Value::Number(n)) => n.as_i64().map_or(0, |n| n as i32),
                    _ => 0,
                };
                Some(RateLimitOverride {
                    requests_per_unit: u32::try_from(rpu)
                        .map_err(|_| "requestsPerUnit too large")?,
                    unit,
                })
            }
        };
        descriptors.push(RateLimitDescriptor {
            entries,
            limit,
            hits_addend: number(field(d, "hitsAddend", "hits_addend"))?
                .map(|value| UInt64Value { value }),
            ..RateLimitDescriptor::default()
        });
    }
    let hits = number(field(v, "hitsAddend", "hits_addend"))?.unwrap_or(0);
    Ok(RateLimitRequest {
        domain: text(field(v, "domain", "domain")),
        descriptors,
        hits_addend: u32::try_from(hits).map_err(|_| "hitsAddend too large")?,
    })
}

fn code(c: i32) -> &'static str {
    match Code::try_from(c) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// The response in protobuf's JSON mapping: fields at their default value left out.
fn response(r: &RateLimitResponse) -> Value {
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            o.insert("code".into(), json!(code(s.code)));
            if let Some(l) = &s.current_limit {
                let mut limit = Map::new();
                if !l.name.is_empty() {
                    limit.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                let unit = Unit::from_proto(l.unit).map_or("UNKNOWN".to_string(), |u| {
                    format!("{u:?}").to_ascii_uppercase()
                });
                limit.insert("unit".into(), json!(unit));
                o.insert("currentLimit".into(), Value::Object(limit));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", d.seconds)),
                );
            }
            Value::Object(o)
        })
        .collect();
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code(r.overall_code)));
    out.insert("statuses".into(), Value::Array(statuses));
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}
