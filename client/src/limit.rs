//! A limit declared once: its policy, its class (what happens when the store does not answer),
//! and the options a gateway applies to it (leases, a hot key split over sub-keys).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::command::{Algorithm, Class, Policy};

/// One limit a gateway enforces, e.g. "100 per minute per API key, contract class". Clones share
/// the round-robin over sub-keys.
#[derive(Clone, Debug)]
pub struct Limit {
    pub(crate) name: String,
    pub(crate) policy: Policy,
    pub(crate) class: Class,
    pub(crate) lease: Option<u64>,
    pub(crate) split: u32,
    pub(crate) local: Option<(u64, u64)>,
    pub(crate) overshoot: bool,
    next: Arc<AtomicU64>,
}

impl Limit {
    /// `name` is the key type in metrics and the decision log ("login", "api"); never the key.
    pub fn new(name: &str, policy: Policy, class: Class) -> Limit {
        Limit {
            name: name.to_string(),
            policy,
            class,
            lease: None,
            split: 1,
            local: None,
            overshoot: false,
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Take up to `k` tokens per store call with `RL.LEASE` and spend them locally. The policy's
    /// algorithm becomes the token bucket (the bucket `RL.LEASE` shares with `RL.TOKENBUCKET`).
    /// For the fleet to keep B + L·t/W, give it `BURST B − N·k` (docs/fleet.md).
    pub fn lease(mut self, k: u64) -> Limit {
        self.policy.algorithm = Algorithm::TokenBucket;
        self.lease = Some(k.max(1));
        self
    }

    /// Split a hot key over `k` sub-keys, each with L/k (and B/k), whose hash tags are on `k`
    /// different Cluster slots; each request goes to the next sub-key in turn.
    pub fn split(mut self, k: u32) -> Limit {
        self.split = k.max(1);
        self
    }

    /// Security class: the strict local limit used while the store does not answer (`limit`
    /// per `window_ms` in this process). Without it, L/N for N gateways, or fail closed when the
    /// fleet size is unknown.
    pub fn local_limit(mut self, limit: u64, window_ms: u64) -> Limit {
        self.local = Some((limit, window_ms));
        self
    }

    /// Contract class: fall back on a local bucket of the whole L (brief overshoot up to N·L
    /// across the fleet is acceptable) instead of L/N.
    pub fn overshoot(mut self, ok: bool) -> Limit {
        self.overshoot = ok;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn class(&self) -> Class {
        self.class
    }
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The policy each store key gets: the limit's, divided by the split.
    pub fn store_policy(&self) -> Policy {
        let k = u64::from(self.split);
        if k == 1 {
            return self.policy;
        }
        Policy {
            limit: (self.policy.limit / k).max(1),
            burst: self.policy.burst.map(|b| (b / k).max(1)),
            ..self.policy
        }
    }

    /// The store key for this request: `key` itself, or the next of its sub-keys.
    pub fn store_key(&self, key: &str) -> String {
        if self.split == 1 {
            return key.to_string();
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % u64::from(self.split);
        sub_keys(key, self.split)
            .into_iter()
            .nth(usize::try_from(i).unwrap_or(0))
            .unwrap_or_else(|| key.to_string())
    }
}

/// The `k` sub-keys of `key`: `{<hash of key>#<salt>}<key>`, salts picked so that the hash tags
/// fall on `k` different slots (the key's own hash tag, if any, is overridden by the leading one).
pub fn sub_keys(key: &str, k: u32) -> Vec<String> {
    let hash = fnv1a(key.as_bytes());
    let mut slots = Vec::new();
    let mut keys = Vec::new();
    let mut salt = 0u32;
    while keys.len() < k.min(16_384) as usize {
        let tag = format!("{hash:016x}#{salt}");
        let slot = key_slot(tag.as_bytes());
        if !slots.contains(&slot) {
            slots.push(slot);
            keys.push(format!("{{{tag}}}{key}"));
        }
        salt += 1;
    }
    keys
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key, mod 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = key.get(open + 1..)?;
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| rest.get(..close)).flatten()
    });
    crc16(tagged.unwrap_or(key)) % 16_384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
    }

    #[test]
    fn sub_keys_are_on_distinct_slots_and_share_the_rate() {
        let keys = sub_keys("api:{tenant}:hot", 8);
        let mut slots: Vec<u16> = keys.iter().map(|k| key_slot(k.as_bytes())).collect();
        slots.sort();
        slots.dedup();
        assert_eq!(slots.len(), 8);
        assert!(keys.iter().all(|k| k.ends_with("api:{tenant}:hot")));
        let limit = Limit::new("hot", Policy::gcra(100, 1000).burst(40), Class::Contract).split(8);
        assert_eq!(limit.store_policy().limit, 12);
        assert_eq!(limit.store_policy().burst, Some(5));
        let picked: Vec<String> = (0..8)
            .map(|_| limit.store_key("api:{tenant}:hot"))
            .collect();
        assert_eq!(picked, keys);
    }
}
