//! The billing journal: one line per key, `amount algorithm L W B key-in-hex` (B `-` when unset).

use std::collections::HashMap;
use std::path::Path;

use crate::command::{Algorithm, Policy};
use crate::ledger::Debt;

pub(crate) fn write(path: &Path, debts: &HashMap<String, Debt>) -> std::io::Result<()> {
    let mut text = String::new();
    for (key, d) in debts.iter().filter(|(_, d)| d.amount > 0) {
        let p = d.policy;
        let burst = p.burst.map_or("-".to_string(), |b| b.to_string());
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        text += &format!(
            "{} {} {} {} {burst} {hex}\n",
            d.amount,
            p.algorithm.name(),
            p.limit,
            p.window_ms
        );
    }
    if text.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

/// The debts in the journal (a line that does not parse is logged and skipped); the file is
/// removed once read: the next shutdown writes what is still owed.
pub(crate) fn read(path: &Path) -> HashMap<String, Debt> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return HashMap::new();
    };
    let mut debts = HashMap::new();
    for line in text.lines() {
        match parse(line) {
            Some((key, debt)) => {
                debts.insert(key, debt);
            }
            None => log::error!("billing journal {}: bad line {line:?}", path.display()),
        }
    }
    let _ = std::fs::remove_file(path);
    debts
}

fn parse(line: &str) -> Option<(String, Debt)> {
    let mut w = line.split(' ');
    let amount = w.next()?.parse().ok()?;
    let algorithm = Algorithm::parse(w.next()?)?;
    let limit = w.next()?.parse().ok()?;
    let window_ms = w.next()?.parse().ok()?;
    let burst = match w.next()? {
        "-" => None,
        b => Some(b.parse().ok()?),
    };
    let hex = w.next()?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let key = String::from_utf8(bytes).ok()?;
    let policy = Policy {
        algorithm,
        limit,
        window_ms,
        burst,
    };
    Some((key, Debt { policy, amount }))
}
