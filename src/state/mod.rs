//! The stored limiter: what one Redis key of type `ratelimit` holds, and its byte encoding.
//!
//! The same bytes serve the RDB (and so `DUMP`/`RESTORE`, `DEBUG RELOAD`, cluster migration), the
//! AOF rewrite and the effect replicated after each decision (`RL.SETSTATE`). Decoding validates
//! every field: bytes from a file, a replica link or a client never reach an algorithm unchecked.
//!
//! Layout, version 1, integers little-endian:
//! `[format u8][algorithm u8][L u64][W ms u64][B u64][algorithm state]`
//! - 1 GCRA: `tat u128` (units of the stored policy).
//! - 2 token bucket: `tokens u128` (units, at most the capacity), `last_ns u64`.

use crate::algo::{gcra::Gcra, token_bucket, token_bucket::TokenBucket, Policy};
use crate::error::Error;

pub mod rdb;

/// The data type's encoding version handed to Redis (`RedisModule_CreateDataType`).
pub const ENCVER: i32 = 1;
/// Version byte at the start of every encoded state.
const FORMAT: u8 = 1;

/// One limiter: the policy it was last decided under, and its algorithm's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limiter {
    pub policy: Policy,
    pub state: AlgoState,
}

// A key's value is one allocation of a `Limiter`, so its size is memory per key: 48 bytes is a
// jemalloc size class (it was 80 before the policy was packed and the u128 states aligned to 8).
// An algorithm state larger than 24 bytes inline would push it to the next class, 64.
const _: () = assert!(std::mem::size_of::<Limiter>() <= 48);

/// The algorithm's state, tagged by algorithm. A key keeps its algorithm for life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgoState {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
}

impl AlgoState {
    fn tag(&self) -> u8 {
        match self {
            AlgoState::Gcra(_) => 1,
            AlgoState::TokenBucket(_) => 2,
        }
    }

    /// How the algorithm is named in errors (`WRONGTYPE the key holds a GCRA limiter …`).
    pub fn name(&self) -> &'static str {
        match self {
            AlgoState::Gcra(_) => "GCRA",
            AlgoState::TokenBucket(_) => "token bucket",
        }
    }
}

impl Limiter {
    /// Heap bytes this limiter holds beyond its own struct, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        match &self.state {
            AlgoState::Gcra(_) | AlgoState::TokenBucket(_) => 0,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(FORMAT);
        out.push(self.state.tag());
        for n in [
            self.policy.limit(),
            self.policy.window_ms(),
            self.policy.burst(),
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        match &self.state {
            AlgoState::Gcra(g) => out.extend_from_slice(&g.tat.to_le_bytes()),
            AlgoState::TokenBucket(t) => {
                out.extend_from_slice(&t.tokens.to_le_bytes());
                out.extend_from_slice(&t.last_ns.to_le_bytes());
            }
        }
    }

    /// Decodes and validates; any malformed, truncated, trailing or out-of-range byte is an error.
    pub fn decode(bytes: &[u8]) -> Result<Limiter, Error> {
        let mut r = Reader(bytes);
        if r.u8()? != FORMAT {
            return Err(Error::BadState("unknown format version"));
        }
        let tag = r.u8()?;
        let (limit, window_ms, burst) = (r.u64()?, r.u64()?, r.u64()?);
        let policy = Policy::new(limit, window_ms, burst)
            .map_err(|_| Error::BadState("policy out of range"))?;
        let state = match tag {
            1 => {
                let tat = r.u128()?;
                // Any instant a u64 of nanoseconds can hold, plus a full bucket of debt.
                let max = policy.units_at(u64::MAX) + u128::from(burst) * policy.units_per_token();
                if tat > max {
                    return Err(Error::BadState("GCRA arrival time out of range"));
                }
                AlgoState::Gcra(Gcra { tat })
            }
            2 => {
                let (tokens, last_ns) = (r.u128()?, r.u64()?);
                if tokens > token_bucket::capacity(&policy) {
                    return Err(Error::BadState("token bucket balance above its capacity"));
                }
                AlgoState::TokenBucket(TokenBucket { tokens, last_ns })
            }
            _ => return Err(Error::BadState("unknown algorithm")),
        };
        if !r.0.is_empty() {
            return Err(Error::BadState("trailing bytes"));
        }
        Ok(Limiter { policy, state })
    }
}

/// A bounds-checked cursor over encoded bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(Error::BadState("truncated"))?;
        self.0 = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn u128(&mut self) -> Result<u128, Error> {
        Ok(u128::from_le_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gcra() -> Limiter {
        Limiter {
            policy: Policy::new(10, 1000, 20).unwrap(),
            state: AlgoState::Gcra(Gcra { tat: 12345 }),
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        gcra().encode(&mut buf);
        assert_eq!(buf.len(), 2 + 24 + 16);
        assert_eq!(Limiter::decode(&buf), Ok(gcra()));
    }

    #[test]
    fn rejects_garbage() {
        let mut buf = Vec::new();
        gcra().encode(&mut buf);
        for cut in 0..buf.len() {
            assert!(
                Limiter::decode(&buf[..cut]).is_err(),
                "prefix of {cut} bytes"
            );
        }
        let mut long = buf.clone();
        long.push(0);
        assert_eq!(
            Limiter::decode(&long),
            Err(Error::BadState("trailing bytes"))
        );
        let mut zero_limit = buf.clone();
        zero_limit[2..10].fill(0);
        assert_eq!(
            Limiter::decode(&zero_limit),
            Err(Error::BadState("policy out of range"))
        );
        let mut bad_tag = buf;
        bad_tag[1] = 99;
        assert_eq!(
            Limiter::decode(&bad_tag),
            Err(Error::BadState("unknown algorithm"))
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = Limiter::decode(&bytes);
        }
    }
}
