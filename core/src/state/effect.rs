//! The effect envelope: how every algorithm's effect travels to replicas and the AOF.
//!
//! An effect travels as `RL.SETSTATE key <effect>`, one argument after the key holding what to
//! apply and the key's absolute expiry: `[kind u8][expire_at_ms u64][body]`, where kind
//! [`EFFECT_STATE`] has a full state encoding as its body and [`EFFECT_DELTA`] a delta (the sliding
//! log's, `state::delta`). One argument rather than `<state> PXAT <ms>`: `RM_Replicate` makes an
//! object of every argument and Redis copies and frees them after the command, about 440
//! instructions per argument (callgrind); an admitted RL.GCRA went from 10,055 to 9,175
//! instructions. The kinds cannot be taken for a state's format version (those count up from 1), so
//! `RL.SETSTATE key <state> [PXAT ms]` (the AOF rewrite's form, and that of AOF files written
//! before) still reads as it did.

/// Effect kind: the body is a full state (see the module comment).
pub const EFFECT_STATE: u8 = 0xE5;
/// Effect kind: the body is a delta.
pub const EFFECT_DELTA: u8 = 0xED;
/// An effect envelope's header: kind and expiry.
pub const EFFECT_HEADER: usize = 9;

/// An effect as received: what to apply, and the key's absolute expiry (ms since the epoch).
#[derive(Debug, PartialEq, Eq)]
pub enum Effect<'a> {
    State { state: &'a [u8], expire_at_ms: u64 },
    Delta { delta: &'a [u8], expire_at_ms: u64 },
}

impl Effect<'_> {
    /// Splits an effect envelope; None if `bytes` does not start with an effect kind (it is then
    /// a bare state). The body is validated by whoever applies it.
    pub fn parse(bytes: &[u8]) -> Option<Effect<'_>> {
        let (&kind, rest) = bytes.split_first()?;
        if kind != EFFECT_STATE && kind != EFFECT_DELTA {
            return None;
        }
        let (at, body) = rest.split_first_chunk::<8>()?;
        let expire_at_ms = u64::from_le_bytes(*at);
        Some(if kind == EFFECT_STATE {
            Effect::State {
                state: body,
                expire_at_ms,
            }
        } else {
            Effect::Delta {
                delta: body,
                expire_at_ms,
            }
        })
    }
}

/// The effect header of a full state: append the state's encoding after it.
pub fn state_effect_header(expire_at_ms: u64, out: &mut Vec<u8>) {
    out.push(EFFECT_STATE);
    out.extend_from_slice(&expire_at_ms.to_le_bytes());
}
