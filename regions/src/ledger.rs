//! What each region of one key may be admitting under, now and until every share it could hold
//! has expired: the safety half of the controller, pure (numbers in, numbers out).
//!
//! A region's *use* at instant t is the share it holds while that share is in force, else its
//! safe share. The controller does not always know which share a region holds: a write whose
//! answer was lost may or may not have landed. So each region keeps *claims*: the share it
//! confirmed (read back), and every write not confirmed yet; its use at t is the largest of
//! what each claim would give at t (the claim's share before its end, the safe share after).
//!
//! The rule every write obeys ([`largest`]): at no instant does it raise the sum of the uses
//! above L (or above what the sum already was, where it was above L before: a lower is always
//! allowed). So the shares of a key never sum above L, whichever writes landed, whichever region
//! is unreachable, whenever the controller dies.

/// A share `share` in force until `until_ms` (the share's expiry plus the clock margin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub share: u64,
    pub until_ms: u64,
}

/// One region of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// What the region said it holds (None: no share, it uses its safe share).
    pub confirmed: Option<Claim>,
    /// Writes sent and not confirmed, and at start what the previous controller may have
    /// granted; each dropped once it has ended or a later read settles it.
    pub pending: Vec<Claim>,
}

impl Slot {
    /// The region's use at `t`: see the module comment.
    pub fn use_at(&self, t: u64, safe: u64) -> u64 {
        let each = |c: &Claim| if t < c.until_ms { c.share } else { safe };
        // Without a confirmed share the region may still hold none: its safe share.
        let confirmed = self.confirmed.as_ref().map_or(safe, each);
        self.pending.iter().map(each).fold(confirmed, u64::max)
    }

    /// The share in force now, as the region confirmed it (its safe share when it holds none).
    pub fn held(&self, now: u64, safe: u64) -> u64 {
        match self.confirmed {
            Some(c) if now < c.until_ms => c.share,
            _ => safe,
        }
    }

    /// The most it may use from `now` on.
    pub fn peak(&self, now: u64, safe: u64) -> u64 {
        instants(std::slice::from_ref(self), now, None)
            .map(|t| self.use_at(t, safe))
            .max()
            .unwrap_or(safe)
    }

    /// After the region answered a read at `now`: the claims that ended by then are settled
    /// (the store refuses a share whose expiry has passed, so such a write can no longer land;
    /// one that landed shows in the read).
    pub fn forget(&mut self, now: u64) {
        self.pending.retain(|c| c.until_ms > now);
    }

    /// For a region that did not answer: the claims that ended still say it may be at its safe
    /// share; one of them is enough to say so.
    pub fn compact(&mut self, now: u64) {
        let mut ended = false;
        self.pending
            .retain(|c| c.until_ms > now || !std::mem::replace(&mut ended, true));
    }
}

/// `now` and every later instant where some use may change (a claim's end), and `extra`.
fn instants(slots: &[Slot], now: u64, extra: Option<u64>) -> impl Iterator<Item = u64> + '_ {
    let ends = slots
        .iter()
        .flat_map(|s| s.confirmed.iter().chain(&s.pending))
        .map(|c| c.until_ms)
        .chain(extra)
        .filter(move |&t| t > now);
    std::iter::once(now).chain(ends)
}

/// The largest share up to `want` that region `a` may be written, to hold until `until_ms`,
/// under the rule of the module comment; None when no share may be written with that end
/// (the safe share that follows it would overrun L).
pub fn largest(
    slots: &[Slot],
    a: usize,
    want: u64,
    until_ms: u64,
    now: u64,
    safe: u64,
    limit: u64,
) -> Option<u64> {
    let mine = slots.get(a)?;
    let mut cap = want;
    for t in instants(slots, now, Some(until_ms)) {
        let others: u64 = slots
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != a)
            .map(|(_, s)| s.use_at(t, safe))
            .sum();
        let before = mine.use_at(t, safe);
        // What a's use may be at t: up to L, or what it already was.
        let room = limit.saturating_sub(others).max(before);
        if t < until_ms {
            cap = cap.min(room);
        } else if safe > room {
            return None;
        }
    }
    Some(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(share: u64, until_ms: u64) -> Option<Claim> {
        Some(Claim { share, until_ms })
    }

    fn slot(share: u64, until_ms: u64) -> Slot {
        Slot {
            confirmed: claim(share, until_ms),
            pending: vec![],
        }
    }

    #[test]
    fn a_raise_waits_for_the_lower() {
        // L 100, safe 33: a holds 80, b and c 10 each, all until 1000.
        let mut slots = vec![slot(80, 1000), slot(10, 1000), slot(10, 1000)];
        // b may not take what a holds.
        assert_eq!(largest(&slots, 1, 60, 1000, 0, 33, 100), Some(10));
        // a lowered to 20 (not confirmed): still counted at 80.
        slots[0].pending.push(Claim {
            share: 20,
            until_ms: 1000,
        });
        assert_eq!(largest(&slots, 1, 60, 1000, 0, 33, 100), Some(10));
        // Confirmed: b may take 70.
        slots[0] = slot(20, 1000);
        assert_eq!(largest(&slots, 1, 70, 1000, 0, 33, 100), Some(70));
    }

    #[test]
    fn a_share_outliving_a_low_one_would_overrun_at_its_end() {
        // a holds 5 until 500, then its safe 33; b wants 62 until 1000: 33 + 62 + 5 = 100 fits,
        // 66 would not once a is back at 33.
        let slots = vec![slot(5, 500), slot(28, 1000), slot(5, 1000)];
        assert_eq!(largest(&slots, 1, 66, 1000, 0, 33, 100), Some(62));
        // An unreachable region that may hold everything leaves nothing to raise.
        let mut slots = vec![slot(5, 1000), slot(5, 1000), slot(5, 1000)];
        slots[2].pending.push(Claim {
            share: 100,
            until_ms: 2000,
        });
        assert_eq!(largest(&slots, 0, 50, 1000, 0, 33, 100), Some(5));
        assert_eq!(slots[2].peak(0, 33), 100);
        assert_eq!(slots[2].peak(2000, 33), 33);
    }

    use proptest::prelude::*;

    /// What a region really holds: the last write that landed (share, expiry), if any.
    type Truth = Option<(u64, u64)>;

    fn in_force(truth: Truth, t: u64, safe: u64) -> u64 {
        match truth {
            Some((share, until)) if t < until => share,
            _ => safe,
        }
    }

    proptest! {
        /// Writes in any order, each landing or not, its answer arriving or not, time moving
        /// on: the shares really in force never sum above L, now or at any later instant.
        #[test]
        fn shares_in_force_never_sum_above_l(
            limit in 3u64..2000,
            ops in prop::collection::vec(
                (0usize..3, 0u64..2000, 1u64..50, 0u8..4, 0u64..20),
                1..60,
            ),
        ) {
            let safe = limit / 3;
            let mut slots = vec![Slot::default(); 3];
            let mut truth: Vec<Truth> = vec![None; 3];
            let mut now = 100;
            for (r, want, life, fate, gap) in ops {
                now += gap;
                for s in &mut slots {
                    s.compact(now);
                }
                let until = now + life;
                if fate == 3 {
                    slots[r].confirmed = truth[r].map(|(share, until_ms)| Claim { share, until_ms });
                    slots[r].forget(now);
                    continue;
                }
                let Some(share) = largest(&slots, r, want.min(limit), until, now, safe, limit)
                else {
                    continue;
                };
                if share == 0 {
                    continue;
                }
                let claim = Claim { share, until_ms: until };
                // 0: lost before it landed; 1: landed, answer lost; 2: landed and confirmed;
                // 3 (above): a read instead of a write.
                slots[r].pending.push(claim);
                if fate >= 1 {
                    truth[r] = Some((share, until));
                }
                if fate == 2 {
                    let i = slots[r].pending.iter().position(|c| *c == claim);
                    if let Some(i) = i {
                        slots[r].pending.swap_remove(i);
                    }
                    slots[r].confirmed = Some(claim);
                }
                for t in now..now + 60 {
                    let sum: u64 = truth.iter().map(|&h| in_force(h, t, safe)).sum();
                    prop_assert!(sum <= limit, "at {}: {:?} sum {} > {}", t, truth, sum, limit);
                }
            }
        }
    }
}
