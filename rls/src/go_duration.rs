//! The peer's duration settings (`REDIS_TIMEOUT=10s`, `GRPC_MAX_CONNECTION_AGE=24h`) are Go
//! durations: a sequence of decimal numbers, each with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`,
//! `h`), e.g. `1h30m`, `1.5s`, `300ms`; `0` alone is zero. Parsed here the same way.

use std::time::Duration;

pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err("an empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("'{t}': a number without a unit"))?;
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("'{t}': not a duration"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            other => return Err(format!("'{t}': unknown unit '{other}'")),
        };
        total += number * nanos_per;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(format!("'{t}': too long"));
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = |t: &str| parse(t).map(|d| d.as_millis());
        assert_eq!(ms("10s"), Ok(10_000));
        assert_eq!(ms("24h"), Ok(86_400_000));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("1.5s"), Ok(1_500));
        assert_eq!(ms("300ms"), Ok(300));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert!(parse("10").is_err());
        assert!(parse("5 days").is_err());
        assert!(parse("").is_err());
    }
}
