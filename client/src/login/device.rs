//! Trusted devices: a signed, expiring token the guard issues to a device after a successful
//! login and verifies on the next one, bound to the account; and the account's tag, the keyed hash
//! that names its keys in the store (so keys reveal no account name and have a bounded length).
//!
//! A token is `v1.<device>.<expires>.<mac>`: `device` 16 hex digits naming the device (its own
//! budget is per account, the device only tells devices apart in logs), `expires` the Unix second
//! after which it is refused, `mac` the 64 hex digits of HMAC-SHA-256 over the version, the
//! account, the device and the expiry. Nothing in it is secret; forging one needs the key.

use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::Secret;

type HmacSha256 = Hmac<Sha256>;

/// The longest token looked at: a longer one is refused before any work (the four fields of a
/// genuine token take 105 bytes; the expiry has at most 20 digits).
pub const MAX_TOKEN_BYTES: usize = 128;

const VERSION: &str = "v1";

/// Signs and verifies device tokens, and tags accounts, with one secret.
pub(super) struct Devices {
    /// HMAC keyed with the secret once; each use starts from a clone.
    keyed: HmacSha256,
    /// Makes every issued device name differ, even two in one nanosecond.
    issued: AtomicU64,
}

/// What a presented token turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// No token was presented.
    Unknown,
    /// A valid token for this account: the device is trusted.
    Trusted,
    /// A token that is malformed, for another account, forged, or expired: treated as unknown.
    Refused,
}

impl Devices {
    pub(super) fn new(secret: &Secret) -> Result<Devices, String> {
        let keyed = HmacSha256::new_from_slice(secret.bytes())
            .map_err(|_| "the device secret is not a valid HMAC key".to_string())?;
        Ok(Devices {
            keyed,
            issued: AtomicU64::new(0),
        })
    }

    fn mac(&self) -> HmacSha256 {
        self.keyed.clone()
    }

    /// The account's tag: 32 hex digits of HMAC-SHA-256 over `acct\0<account>`.
    pub(super) fn account_tag(&self, account: &str) -> String {
        let mut m = self.mac();
        m.update(b"acct\0");
        m.update(account.as_bytes());
        hex(&m.finalize().into_bytes()[..16])
    }

    fn signature(&self, account: &str, device: &str, expires_s: u64) -> HmacSha256 {
        let mut m = self.mac();
        for part in [VERSION.as_bytes(), account.as_bytes(), device.as_bytes()] {
            m.update(part);
            m.update(b"\0");
        }
        m.update(expires_s.to_string().as_bytes());
        m
    }

    /// A token for a new device of `account`, valid until `expires_s` (Unix seconds).
    pub(super) fn issue(&self, account: &str, now_ns: u64, expires_s: u64) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let mut m = self.mac();
        m.update(b"device\0");
        m.update(account.as_bytes());
        m.update(&now_ns.to_le_bytes());
        m.update(&n.to_le_bytes());
        let device = hex(&m.finalize().into_bytes()[..8]);
        let mac = self.signature(account, &device, expires_s).finalize();
        format!("{VERSION}.{device}.{expires_s}.{}", hex(&mac.into_bytes()))
    }

    /// Whether `token` is a device of `account` that has not expired at `now_s`. The signature
    /// is compared in constant time.
    pub(super) fn verify(&self, account: &str, token: Option<&str>, now_s: u64) -> Device {
        let Some(token) = token else {
            return Device::Unknown;
        };
        if self.valid(account, token, now_s) {
            Device::Trusted
        } else {
            Device::Refused
        }
    }

    fn valid(&self, account: &str, token: &str, now_s: u64) -> bool {
        if token.len() > MAX_TOKEN_BYTES {
            return false;
        }
        let mut parts = token.split('.');
        let (Some(VERSION), Some(device), Some(expires), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return false;
        };
        let Ok(expires_s) = expires.parse::<u64>() else {
            return false;
        };
        let Some(mac) = unhex(mac) else {
            return false;
        };
        if device.len() != 16 || expires_s <= now_s {
            return false;
        }
        self.signature(account, device, expires_s)
            .verify_slice(&mac)
            .is_ok()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(text, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(byte: u8) -> Devices {
        Devices::new(&Secret::new(vec![byte; 32]).unwrap()).unwrap()
    }

    #[test]
    fn a_token_is_valid_for_its_account_until_it_expires() {
        let d = devices(1);
        let t = d.issue("alice", 5, 1_000);
        assert_eq!(d.verify("alice", Some(&t), 999), Device::Trusted);
        assert_eq!(d.verify("alice", Some(&t), 1_000), Device::Refused);
        assert_eq!(d.verify("bob", Some(&t), 10), Device::Refused);
        assert_eq!(devices(2).verify("alice", Some(&t), 10), Device::Refused);
        assert_eq!(d.verify("alice", None, 10), Device::Unknown);
        assert_ne!(t, d.issue("alice", 5, 1_000), "each device its own name");
    }

    #[test]
    fn altered_or_hostile_tokens_are_refused() {
        let d = devices(1);
        let t = d.issue("alice", 5, 1_000);
        let later = t.replacen(".1000.", ".9000.", 1);
        let mut flipped = t.clone().into_bytes();
        if let Some(last) = flipped.last_mut() {
            *last = if *last == b'0' { b'1' } else { b'0' };
        }
        let flipped = String::from_utf8(flipped).unwrap();
        let long = format!("{t}{}", "0".repeat(MAX_TOKEN_BYTES));
        for bad in [
            later.as_str(),
            flipped.as_str(),
            long.as_str(),
            "",
            "v1",
            "v1...",
            "v2.0011223344556677.1000.00",
            "v1.0011223344556677.-5.00",
            "v1.0011223344556677.1000.zz",
            "v1.0011223344556677.1000.0",
            "v1.é011223344556677.1000.00",
            &format!("{t}.extra"),
        ] {
            assert_eq!(d.verify("alice", Some(bad), 10), Device::Refused, "{bad:?}");
        }
    }

    #[test]
    fn account_tags_are_keyed_and_fixed_length() {
        let d = devices(1);
        assert_eq!(d.account_tag("alice"), d.account_tag("alice"));
        assert_ne!(d.account_tag("alice"), devices(2).account_tag("alice"));
        assert_ne!(d.account_tag("alice"), d.account_tag("bob"));
        assert_eq!(d.account_tag(&"x".repeat(100_000)).len(), 32);
    }
}
