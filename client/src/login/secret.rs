//! The key the guard signs device tokens and names accounts with: bytes that never print.

use std::fmt;

/// The shortest secret accepted: HMAC-SHA-256's block of security, 32 bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// A secret key. `Debug` and `Display` print `***`, so no log line, error or panic message can
/// carry it; the bytes are reachable only inside this module.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// At least [`MIN_SECRET_BYTES`] random bytes (e.g. 32 bytes from `/dev/urandom`, kept in
    /// the deployment's secret store). Shorter is refused: a short key can be guessed offline from
    /// one token.
    pub fn new(bytes: Vec<u8>) -> Result<Secret, String> {
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the device secret has {} bytes: at least {MIN_SECRET_BYTES} are needed",
                bytes.len()
            ));
        }
        Ok(Secret(bytes))
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for Secret {
    /// Overwrites the bytes, so the key does not linger in freed memory (`black_box` keeps the
    /// compiler from dropping the writes as stores to memory about to be freed).
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_and_short_ones_are_refused() {
        let s = Secret::new(vec![7; 32]).unwrap();
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
        assert!(Secret::new(vec![1; 31])
            .unwrap_err()
            .contains("at least 32"));
    }
}
