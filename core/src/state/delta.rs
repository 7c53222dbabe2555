//! Delta effects: what an admitted sliding-log request changed, instead of the whole log.
//!
//! A full-state effect (`RL.SETSTATE key <state> PXAT ms`) of a sliding log is O(L) bytes: at
//! L=10,000 a full log sent 80 KB to the AOF and every replica per 68-byte request. A delta is
//! O(1): the entries that left the window at the front (how many), the request recorded at the
//! back (instant and count), and a fingerprint of the state it was made from. A replica or an AOF
//! replay applies it to the state it holds, in O(entries dropped), and refuses it — an error, the
//! key untouched — when that state's fingerprint differs: a delta never lands on a state it was
//! not made for, so a replica cannot silently diverge.
//!
//! The master sends a delta only for an admit on a sliding log it already held under the same
//! policy; a first write, a policy change, a refund and the AOF rewrite send the full state,
//! which applies to anything.
//!
//! This file is the delta as a value (its encoding); `state::in_place` makes one of an algorithm's
//! `Change`, and `state::replay` applies it to the limiter it was made on.
//!
//! Layout, version 1, integers little-endian (26 bytes):
//! `[format u8 = 1][algorithm u8 = 3][prior fingerprint u64][dropped u32][at_ns u64][count u32]`,
//! sent inside the effect envelope (`state::effect`).

pub use crate::algo::sliding_log::Change;

use crate::algo::bytes::Reader;
use crate::algo::sliding_log::SlidingLog;
use crate::error::Error;

use super::effect::{EFFECT_DELTA, EFFECT_HEADER};

/// Version byte at the start of every encoded delta.
const DELTA_FORMAT: u8 = 1;
/// The only algorithm with deltas: the sliding log (its tag in the state encoding).
pub(crate) const SLIDING_LOG: u8 = <SlidingLog as crate::algo::Algorithm>::TAG;
/// Encoded length.
pub const DELTA_LEN: usize = 26;

/// A delta's whole effect.
pub const DELTA_EFFECT_LEN: usize = EFFECT_HEADER + DELTA_LEN;

/// An admit's change to a sliding log, and the fingerprint of the limiter it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delta {
    pub prior: u64,
    pub change: Change,
}

impl Delta {
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; DELTA_LEN];
        self.encode_into(&mut buf);
        out.extend_from_slice(&buf);
    }

    /// The whole effect of this delta with the key's expiry (no allocation on the command path).
    pub fn effect(&self, expire_at_ms: u64) -> [u8; DELTA_EFFECT_LEN] {
        let mut body = [0u8; DELTA_LEN];
        self.encode_into(&mut body);
        let bytes = [EFFECT_DELTA]
            .into_iter()
            .chain(expire_at_ms.to_le_bytes())
            .chain(body);
        let mut out = [0u8; DELTA_EFFECT_LEN];
        for (slot, byte) in out.iter_mut().zip(bytes) {
            *slot = byte;
        }
        out
    }

    /// The encoding, into a fixed buffer (no allocation on the command path).
    pub fn encode_into(&self, out: &mut [u8; DELTA_LEN]) {
        // A count is at most L <= 10^6 (checked again on apply).
        let count = u32::try_from(self.change.count).unwrap_or(u32::MAX);
        let fields: [&[u8]; 5] = [
            &[DELTA_FORMAT, SLIDING_LOG],
            &self.prior.to_le_bytes(),
            &self.change.dropped.to_le_bytes(),
            &self.change.at_ns.to_le_bytes(),
            &count.to_le_bytes(),
        ];
        let mut rest: &mut [u8] = out;
        for field in fields {
            let (head, tail) = rest.split_at_mut(field.len().min(rest.len()));
            head.copy_from_slice(field.get(..head.len()).unwrap_or_default());
            rest = tail;
        }
    }

    /// Decodes; a wrong version or algorithm, a truncated or a trailing byte is an error. The
    /// values are checked against the state when applied.
    pub fn decode(bytes: &[u8]) -> Result<Delta, Error> {
        let mut r = Reader(bytes);
        if r.u8()? != DELTA_FORMAT {
            return Err(Error::BadState("unknown delta format version"));
        }
        if r.u8()? != SLIDING_LOG {
            return Err(Error::BadState("delta for an algorithm without deltas"));
        }
        let prior = r.u64()?;
        let dropped = r.u32()?;
        let at_ns = r.u64()?;
        let count = u64::from(r.u32()?);
        if !r.0.is_empty() {
            return Err(Error::BadState("trailing bytes"));
        }
        Ok(Delta {
            prior,
            change: Change {
                dropped,
                at_ns,
                count,
            },
        })
    }
}
