//! `RL.GCRA key L W [BURST B] [COST n]` — GCRA: one timestamp per key, admits exactly what a token
//! bucket with the same L, W, B admits.

use super::args::{Amount, Args, Options};
use super::decide::{decide, Algorithm};
use super::{Command, Ctx, KeyAccess, Reply};
use crate::algo::{gcra, Outcome, Policy};
use crate::error::Error;
use crate::state::AlgoState;

pub struct RlGcra;

impl Command for RlGcra {
    const NAME: &'static str = "RL.GCRA";
    const FLAGS: &'static str = "write deny-oom fast";
    const ARITY: i32 = -4;
    const KEY: KeyAccess = KeyAccess::ReadWrite;
    const SUMMARY: &'static str =
        "Decides one request with GCRA: at most L per W ms plus a burst of B";

    fn run(ctx: Ctx, args: Args<'_>) -> Result<Reply, Error> {
        decide::<Self>(ctx, args)
    }
}

impl Algorithm for RlGcra {
    type State = gcra::Gcra;
    const NAME: &'static str = "GCRA";
    const OPTIONS: Options = Options {
        burst: true,
        amount: Amount::Cost,
    };

    fn state_mut(stored: &mut AlgoState) -> Option<&mut gcra::Gcra> {
        match stored {
            AlgoState::Gcra(g) => Some(g),
        }
    }

    fn wrap(state: gcra::Gcra) -> AlgoState {
        AlgoState::Gcra(state)
    }

    fn check(
        state: Option<&gcra::Gcra>,
        policy: &Policy,
        now_ns: u64,
        cost: u64,
    ) -> Outcome<gcra::Gcra> {
        gcra::check(state, policy, now_ns, cost)
    }

    fn rescale(state: &gcra::Gcra, from: &Policy, to: &Policy, now_ns: u64) -> gcra::Gcra {
        gcra::rescale(state, from, to, now_ns)
    }
}
