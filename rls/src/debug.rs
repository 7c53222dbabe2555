//! The debug port's pages, as the peer's: `/rlconfig`, the loaded rules one a line
//! (`stats_key: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false`, then
//! our extensions), and `/stats`, every counter under its statsd name with its value.

use std::fmt::Write;

use crate::config::Node;
use crate::service::Service;

pub const INDEX: &str = "/rlconfig: the rate limit configuration loaded\n/stats: every counter\n";

pub fn config(service: &Service) -> String {
    let config = service.config();
    let mut lines = Vec::new();
    for node in config.domains.values() {
        rules(node, &mut lines);
    }
    lines.sort();
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn rules(node: &Node, out: &mut Vec<String>) {
    for child in node.children.values() {
        if let Some(r) = &child.rule {
            let mut line = String::new();
            let unit = if r.unlimited || r.concurrency.is_some() {
                "UNKNOWN".to_string()
            } else {
                format!("{:?}", r.unit).to_ascii_uppercase()
            };
            let _ = write!(
                line,
                "{}: unit={unit} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                r.stats_key, r.requests_per_unit, r.shadow_mode, r.quota_mode
            );
            if r.unlimited {
                line.push_str(", unlimited: true");
            }
            if let Some(p) = r.policy() {
                let _ = write!(line, ", algorithm: {}", p.algorithm.name());
            }
            if let Some(c) = r.concurrency {
                let _ = write!(line, ", concurrency: {}, ttl_ms: {}", c.limit, c.ttl_ms);
            }
            out.push(line);
        }
        rules(child, out);
    }
}

pub fn stats(service: &Service) -> String {
    let mut out = String::new();
    for (name, value) in service.metrics.peer_counters() {
        let _ = writeln!(out, "{name}: {value}");
    }
    out
}
