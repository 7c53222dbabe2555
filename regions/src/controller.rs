//! One period of the control loop: read every region's demand, split each key's limit, lower
//! the shares that go down, wait for the regions to confirm, then raise the shares that go up,
//! each raise capped by the ledger (`ledger::largest`) so the shares never sum above L.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::config::{expand, Config, Policy};
use crate::ledger::{largest, Claim, Slot};
use crate::link::{Demand, Held, Link};
use crate::split::split;

/// Keys sharing one global policy, and what the controller knows of each key in each region.
pub struct Group {
    pub policy: Policy,
    pub keys: Vec<String>,
    /// `[key][region]`: the claims on the key's limit.
    pub slots: Vec<Vec<Slot>>,
    /// `[key][region]`: the last demand read (None: the region did not answer).
    pub demand: Vec<Vec<Option<Demand>>>,
    /// The patterns whose keys join the group when found (`SCAN`), and every key it holds.
    pub patterns: Vec<String>,
    known: HashSet<String>,
    /// `[key]`: found by a pattern (such a key is forgotten once idle, see `forget`).
    found: Vec<bool>,
    /// `[key][region]`: a found key whose only claim is the one a restarted controller starts
    /// with, until a read of it one period after the start clears it.
    fresh: Vec<Vec<bool>>,
    /// `[key]`: when the key was last asked for in some region (or a region did not answer).
    active_ms: Vec<u64>,
}

impl Group {
    /// A key found by a pattern at `now_ms`, with the claims `start` a restarted controller
    /// gives every key while it learns (None once that is over).
    fn add(&mut self, key: String, regions: usize, now_ms: u64, start: Option<Claim>) {
        let mut slot = Slot::default();
        slot.pending.extend(start);
        self.keys.push(key);
        self.slots.push(vec![slot; regions]);
        self.demand.push(vec![None; regions]);
        self.found.push(true);
        self.fresh.push(vec![start.is_some(); regions]);
        self.active_ms.push(now_ms);
    }

    /// Drops the found keys idle for a lifetime whose claims have all ended (no share of the
    /// controller's can still be in force: a key found again starts from nothing, as it is).
    fn forget(&mut self, now_ms: u64, lifetime: u64) -> usize {
        let ended = |slots: &[Slot]| {
            slots.iter().all(|s| {
                s.confirmed.is_none_or(|c| c.until_ms <= now_ms)
                    && s.pending.iter().all(|c| c.until_ms <= now_ms)
            })
        };
        let keep: Vec<bool> = (0..self.keys.len())
            .map(|k| {
                !(self.found[k]
                    && now_ms >= self.active_ms[k].saturating_add(lifetime)
                    && ended(&self.slots[k]))
            })
            .collect();
        let dropped = keep.iter().filter(|&&k| !k).count();
        if dropped == 0 {
            return 0;
        }
        fn retain<T>(v: &mut Vec<T>, keep: &[bool]) {
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                keep.get(i - 1).copied().unwrap_or(true)
            });
        }
        for (key, &kept) in self.keys.iter().zip(&keep) {
            if !kept {
                self.known.remove(key);
            }
        }
        retain(&mut self.keys, &keep);
        retain(&mut self.slots, &keep);
        retain(&mut self.demand, &keep);
        retain(&mut self.found, &keep);
        retain(&mut self.fresh, &keep);
        retain(&mut self.active_ms, &keep);
        dropped
    }
}

/// What one period did: the controller's metrics.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Wall time of the period (the three steps and the computation).
    pub duration: Duration,
    /// CPU time of the computation alone (the network steps aside).
    pub compute: Duration,
    /// Keys whose shares moved.
    pub keys_moved: usize,
    /// Keys whose shares were written again before their expiry, unchanged.
    pub keys_refreshed: usize,
    /// Shares written (and confirmed or not).
    pub shares_written: usize,
    /// Raises the ledger lowered or held back: what an unreachable region might still use.
    pub raises_capped: usize,
    /// Regions that did not answer one of the steps.
    pub unreachable: Vec<String>,
    /// Why, one line per failed step: `region: what the link or the store said`.
    pub causes: Vec<String>,
    /// Keys found by a pattern this period, and found keys forgotten (idle, their shares over).
    pub keys_found: usize,
    pub keys_forgotten: usize,
}

pub struct Controller {
    config: Config,
    links: Vec<Link>,
    groups: Vec<Group>,
    /// When the first period ran: until a region answers a read one period later, it may hold
    /// whatever a previous controller granted.
    started_ms: Option<u64>,
    learned: Vec<bool>,
}

/// One write: group, key, region, share.
type Write = (usize, usize, usize, u64);

impl Controller {
    pub fn new(config: Config) -> Result<Controller, String> {
        let timeout = Duration::from_millis(config.timeout_ms());
        // A key of the config (or a pattern, which the user's key pattern also matches) for the
        // start's access check.
        let probe = config
            .keys
            .iter()
            .find_map(|g| g.keys.first().or(g.patterns.first()))
            .cloned();
        let load = config.load_library()?;
        let links = config
            .regions
            .iter()
            .map(|r| {
                Link::new(r.connection()?, r.cluster, timeout, probe.as_deref(), load)
                    .map_err(|e| format!("region '{}': {e}", r.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = config.regions.len();
        let mut groups = Vec::new();
        for group in &config.keys {
            let keys = expand(&group.keys)?;
            let count = keys.len();
            groups.push(Group {
                policy: config.policy(group)?,
                slots: vec![vec![Slot::default(); n]; count],
                demand: vec![vec![None; n]; count],
                patterns: group.patterns.clone(),
                known: keys.iter().cloned().collect(),
                found: vec![false; count],
                fresh: vec![vec![false; n]; count],
                active_ms: vec![0; count],
                keys,
            });
        }
        Ok(Controller {
            config,
            links,
            groups,
            started_ms: None,
            learned: vec![false; n],
        })
    }

    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs one period at `now_ms` (the regions' clock: Unix ms).
    pub fn period(&mut self, now_ms: u64) -> Report {
        let began = Instant::now();
        let mut report = Report::default();
        let n = self.links.len();
        let margin = self.config.clock_margin_ms;
        let lifetime = self.config.lifetime_ms;
        let started = *self.started_ms.get_or_insert_with(|| {
            // A previous controller may have granted anything, to expire within a lifetime.
            for g in &mut self.groups {
                let start = Claim {
                    share: g.policy.limit,
                    until_ms: now_ms + lifetime + margin,
                };
                for slots in &mut g.slots {
                    for slot in slots.iter_mut() {
                        slot.pending.push(start);
                    }
                }
            }
            now_ms
        });
        let mut down = vec![false; n];
        let batch = self.config.batch;

        // 0. Find the keys of the patterns (a part of a SCAN pass per period). A key found while
        // the controller still learns starts with the claims every key started with.
        if self.groups.iter().any(|g| !g.patterns.is_empty()) {
            let calls = self.config.scan_calls;
            let groups = &self.groups;
            let found: Vec<Vec<Vec<String>>> = parallel(&mut self.links, |_, link| {
                groups
                    .iter()
                    .map(|g| match g.patterns.is_empty() {
                        true => Vec::new(),
                        // A region that fails to answer is seen at the read.
                        false => link.discover(&g.patterns, calls, batch).unwrap_or_default(),
                    })
                    .collect()
            });
            let learning = started + lifetime + margin;
            for per_group in found {
                for (gi, names) in per_group.into_iter().enumerate() {
                    for name in names {
                        // One key, one group: a key listed in one group, or found by an earlier
                        // group's pattern, is not split again under another group's L.
                        if self.groups.iter().any(|g| g.known.contains(&name)) {
                            continue;
                        }
                        let Some(g) = self.groups.get_mut(gi) else {
                            continue;
                        };
                        let start = (now_ms < learning).then_some(Claim {
                            share: g.policy.limit,
                            until_ms: learning,
                        });
                        g.known.insert(name.clone());
                        g.add(name, n, now_ms, start);
                        report.keys_found += 1;
                    }
                }
            }
        }

        // 1. Read.
        let groups = &self.groups;
        let reads: Vec<Result<Vec<Vec<Demand>>, String>> = parallel(&mut self.links, |_, link| {
            groups.iter().map(|g| link.demand(&g.keys, batch)).collect()
        });
        let compute = Instant::now();
        for (r, read) in reads.into_iter().enumerate() {
            let settle = !self.learned[r] && now_ms >= started + self.config.period_ms;
            match read {
                Ok(rows) => {
                    for (g, rows) in self.groups.iter_mut().zip(rows) {
                        for (k, d) in rows.into_iter().enumerate() {
                            let slot = &mut g.slots[k][r];
                            slot.confirmed = (d.share > 0).then_some(Claim {
                                share: d.share,
                                until_ms: d.expire_at_ms + margin,
                            });
                            // A found key has no write of this controller's before its first
                            // read: only the start's claim goes.
                            let fresh = &mut g.fresh[k][r];
                            if settle || (*fresh && now_ms >= started + self.config.period_ms) {
                                slot.pending.clear();
                                *fresh = false;
                            }
                            g.demand[k][r] = Some(d);
                        }
                    }
                    self.learned[r] |= settle;
                }
                Err(e) => {
                    down[r] = true;
                    report
                        .causes
                        .push(format!("{}: {e}", self.config.regions[r].name));
                    for g in &mut self.groups {
                        for d in &mut g.demand {
                            d[r] = None;
                        }
                    }
                }
            }
        }

        // 2. Split, and sort the writes: lowers (and refreshes at or below the safe share)
        // first, raises after the lowers are confirmed.
        let expire_at = now_ms + lifetime;
        let until = expire_at + margin;
        let mut lowers: Vec<Write> = Vec::new();
        let mut raises: Vec<Write> = Vec::new();
        for (gi, g) in self.groups.iter_mut().enumerate() {
            let p = &g.policy;
            let step = ((p.limit as f64 * self.config.hysteresis) as u64).max(1);
            for (k, slots) in g.slots.iter_mut().enumerate() {
                for (slot, d) in slots.iter_mut().zip(&g.demand[k]) {
                    match d {
                        Some(_) => slot.forget(now_ms),
                        None => slot.compact(now_ms),
                    }
                }
                let asked: Vec<Option<u64>> =
                    g.demand[k].iter().map(|d| d.map(|d| d.asked)).collect();
                // A found key nobody asked for in a lifetime is left to expire (then forgotten).
                if asked.iter().any(|a| a.is_none_or(|a| a > 0)) {
                    g.active_ms[k] = now_ms;
                } else if g.found[k] && now_ms >= g.active_ms[k].saturating_add(lifetime) {
                    continue;
                }
                let reserved: u64 = (0..n)
                    .filter(|&r| asked[r].is_none())
                    .map(|r| slots[r].peak(now_ms, p.safe))
                    .sum();
                let held: Vec<u64> = slots.iter().map(|s| s.held(now_ms, p.safe)).collect();
                let targets = split(p.limit, p.floor, reserved, &asked);
                let moved = targets.as_ref().is_some_and(|t| {
                    t.iter()
                        .zip(&held)
                        .any(|(t, h)| t.is_some_and(|t| t.abs_diff(*h) > step))
                });
                let refresh = !moved && due(&g.keys[k], slots, now_ms, lifetime);
                if moved {
                    report.keys_moved += 1;
                } else if refresh {
                    report.keys_refreshed += 1;
                } else {
                    continue;
                }
                for r in (0..n).filter(|&r| asked[r].is_some()) {
                    let want = match (&targets, moved) {
                        (Some(t), true) => t[r].unwrap_or(held[r]),
                        _ => held[r],
                    };
                    if want <= held[r].min(p.safe) || want < held[r] {
                        lowers.push((gi, k, r, want));
                    } else {
                        raises.push((gi, k, r, want));
                    }
                }
            }
        }
        let mut spent = compute.elapsed();

        // 3. Lower, then raise: each share written is first claimed, then settled by the answer.
        for (phase, writes) in [lowers, raises].into_iter().enumerate() {
            let started = Instant::now();
            let mut per_region: Vec<Vec<Vec<(usize, u64)>>> =
                vec![vec![Vec::new(); self.groups.len()]; n];
            for (gi, k, r, want) in writes {
                let g = &mut self.groups[gi];
                let p = &g.policy;
                let share = match largest(&g.slots[k], r, want, until, now_ms, p.safe, p.limit) {
                    Some(s) if s > 0 => s,
                    _ => {
                        report.raises_capped += 1;
                        continue;
                    }
                };
                if share < want && phase == 1 {
                    report.raises_capped += 1;
                }
                g.slots[k][r].pending.push(Claim {
                    share,
                    until_ms: until,
                });
                per_region[r][gi].push((k, share));
                report.shares_written += 1;
            }
            spent += started.elapsed();
            let groups = &self.groups;
            let answers: Vec<Result<Vec<Vec<Held>>, String>> =
                parallel(&mut self.links, |r, link| {
                    groups
                        .iter()
                        .zip(&per_region[r])
                        .map(|(g, w)| {
                            let writes: Vec<(&str, u64, u64)> = w
                                .iter()
                                .map(|&(k, s)| (g.keys[k].as_str(), s, expire_at))
                                .collect();
                            link.share(&g.policy, &writes, batch)
                        })
                        .collect()
                });
            let started = Instant::now();
            for (r, answer) in answers.into_iter().enumerate() {
                let answer = match answer {
                    Ok(a) => a,
                    Err(e) => {
                        report
                            .causes
                            .push(format!("{}: {e}", self.config.regions[r].name));
                        // The claims stay until they end: those writes may have landed.
                        down[r] = true;
                        continue;
                    }
                };
                for ((g, writes), rows) in self.groups.iter_mut().zip(&per_region[r]).zip(answer) {
                    for (&(k, share), held) in writes.iter().zip(rows) {
                        let slot = &mut g.slots[k][r];
                        let sent = Claim {
                            share,
                            until_ms: until,
                        };
                        if let Some(i) = slot.pending.iter().position(|c| *c == sent) {
                            slot.pending.swap_remove(i);
                        }
                        slot.confirmed = (held.share > 0).then_some(Claim {
                            share: held.share,
                            until_ms: held.expire_at_ms + margin,
                        });
                    }
                }
            }
            spent += started.elapsed();
        }
        for g in &mut self.groups {
            report.keys_forgotten += g.forget(now_ms, lifetime);
        }
        report.unreachable = (0..n)
            .filter(|&r| down[r])
            .map(|r| self.config.regions[r].name.clone())
            .collect();
        report.compute = spent;
        report.duration = began.elapsed();
        report
    }
}

/// Whether a key's shares are due to be written again: one of them has less than half its
/// lifetime left (less a part of a quarter lifetime that depends on the key, so the keys do not
/// all come due in the same period), or a region holds none.
fn due(key: &str, slots: &[Slot], now_ms: u64, lifetime: u64) -> bool {
    let jitter = fnv(key) % (lifetime / 4).max(1);
    slots.iter().any(|s| match s.confirmed {
        Some(c) => c.until_ms.saturating_sub(now_ms) < lifetime / 2 - jitter,
        None => true,
    })
}

fn fnv(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Runs `f` on every link at once, one thread each: a period's step takes the slowest region's
/// time, not the sum.
fn parallel<T: Send>(links: &mut [Link], f: impl Fn(usize, &mut Link) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = links
            .iter_mut()
            .enumerate()
            .map(|(r, link)| {
                let f = &f;
                s.spawn(move || f(r, link))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(t) => t,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}
