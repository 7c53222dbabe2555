//! What a request asks of a limiter: the one value every limiter command decides through
//! (`Algorithm::decide`), in place of a cost and a flag. Parsing builds it; the plan reads
//! from it what the request spends, whether it only looks, and whether the algorithm's `check`
//! answers it (so the in-place paths may stand in for it).

use super::decision::Decision;

/// A request's amount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// `COST 0`: answered as a cost-1 request would be; spends and stores nothing.
    Peek,
    /// `COST n`, n ≥ 1 and at most the capacity: the algorithm's `check` with that cost.
    Cost(u64),
    /// `RL.LEASE … WANT n`, n ≥ 1: the token bucket grants what it holds, up to n
    /// (`token_bucket::lease`).
    Lease(u64),
    /// `RL.SHAPE … COST cost` (0 peeks) with `undelayed` (d): the shaper's queue
    /// (`shape::shaped`), which also answers how long the request waits.
    Shaped { cost: u64, undelayed: u64 },
}

impl Amount {
    /// `COST n` as parsed: 0 peeks.
    pub fn cost(n: u64) -> Amount {
        if n == 0 {
            Amount::Peek
        } else {
            Amount::Cost(n)
        }
    }

    /// How many tokens it asks for; 0 for a peek.
    #[inline]
    pub fn asked(self) -> u64 {
        match self {
            Amount::Peek => 0,
            Amount::Cost(n) | Amount::Lease(n) => n,
            Amount::Shaped { cost, .. } => cost,
        }
    }

    /// It only looks: nothing is spent or stored, whatever the policy.
    #[inline]
    pub fn peeks(self) -> bool {
        self.asked() == 0
    }

    /// It is decided by the algorithm's own `check` with [`Amount::asked`] as the cost, so an
    /// algorithm's in-place paths (`decide_in_place`, the remembered admit) may stand in for
    /// it, and a cost above a share's capacity waits for the share; a lease and the shaper
    /// decide otherwise.
    #[inline]
    pub fn checks(self) -> bool {
        matches!(self, Amount::Peek | Amount::Cost(_))
    }

    /// What a decision on it spent: charged to the other configurations a key remembers,
    /// counted for a region's share. A request spends its cost when admitted (nothing when
    /// denied); a lease what it was granted.
    #[inline]
    pub fn spent(self, decision: &Decision) -> u64 {
        match self {
            Amount::Lease(_) => decision.allowed,
            _ if decision.allowed == 0 => 0,
            other => other.asked(),
        }
    }
}
