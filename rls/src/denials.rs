//! The denial cache: a store key the store denied with nothing left and a retry time is denied
//! here until that time, without a store call. The peer's local cache keeps keys over the limit
//! for the rest of their window; this one keeps the store's own retry time, so it is exact for
//! every algorithm (a GCRA key is cached until its next token, not for a whole window).

use std::collections::HashMap;
use std::sync::Mutex;

pub struct Denials {
    until_ns: Mutex<HashMap<String, u64>>,
    max: usize,
}

impl Denials {
    pub fn new(max: usize) -> Denials {
        Denials {
            until_ns: Mutex::new(HashMap::new()),
            max,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.until_ns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ms left before `key` may be asked again, if it is cached as denied at `now_ns`.
    pub fn denied(&self, key: &str, now_ns: u64) -> Option<u64> {
        let mut map = self.map();
        match map.get(key) {
            Some(until) if *until > now_ns => Some((until - now_ns).div_ceil(1_000_000)),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Deny `key` until `retry_ms` after `now_ns`. Beyond `max` keys, the expired ones go; if none
    /// has expired the new one is not kept (the store still answers for it).
    pub fn deny(&self, key: &str, now_ns: u64, retry_ms: u64) {
        let mut map = self.map();
        if map.len() >= self.max {
            map.retain(|_, until| *until > now_ns);
            if map.len() >= self.max {
                return;
            }
        }
        map.insert(
            key.to_string(),
            now_ns.saturating_add(retry_ms.saturating_mul(1_000_000)),
        );
    }

    /// Forget everything: a new config may have changed the limits.
    pub fn clear(&self) {
        self.map().clear();
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_until_the_retry_time_then_forgotten() {
        let d = Denials::new(2);
        d.deny("a", 1_000_000_000, 1500);
        assert_eq!(d.denied("a", 1_000_000_000), Some(1500));
        assert_eq!(d.denied("a", 2_499_999_999), Some(1));
        assert_eq!(d.denied("a", 2_500_000_000), None);
        assert!(d.is_empty());
        d.deny("a", 0, 10);
        d.deny("b", 0, 10);
        d.deny("c", 0, 10);
        assert_eq!(d.denied("c", 0), None, "full of live entries: not kept");
        d.deny("c", 20_000_000, 10);
        assert_eq!(
            d.denied("c", 20_000_000),
            Some(10),
            "expired ones made room"
        );
    }
}
