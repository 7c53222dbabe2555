//! Structured logs on stderr: `LOG_FORMAT=json` writes one JSON object per line (`time`,
//! `level`, `target`, `msg`), anything else logfmt-style text; `LOG_LEVEL` as the peer names the
//! levels (debug, info, warn, error; trace too).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct Logger {
    level: log::LevelFilter,
    json: bool,
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let msg = r.args().to_string();
        let line = if self.json {
            format!(
                "{{\"time\":{now:.6},\"level\":\"{}\",\"target\":\"{}\",\"msg\":{}}}\n",
                r.level().as_str().to_ascii_lowercase(),
                r.target(),
                json_string(&msg)
            )
        } else {
            format!(
                "time={now:.6} level={} target={} msg={}\n",
                r.level().as_str().to_ascii_lowercase(),
                r.target(),
                json_string(&msg)
            )
        };
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Installs the logger once (later calls are ignored).
pub fn init(level: &str, format: &str) {
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" => log::LevelFilter::Trace,
        "debug" => log::LevelFilter::Debug,
        "info" => log::LevelFilter::Info,
        "error" | "fatal" | "panic" => log::LevelFilter::Error,
        _ => log::LevelFilter::Warn,
    };
    let json = format.eq_ignore_ascii_case("json");
    if log::set_boxed_logger(Box::new(Logger { level, json })).is_ok() {
        log::set_max_level(level);
    }
}
