//! One attack beside legitimate users, tick by tick on the debug clock, and what it measured.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ratelimit_client::login::{Attempt, LoginGuard, LoginSettings, Outcome, Secret, Tier, Verdict};
use ratelimit_client::{Config, Limiter, ManualClock, Store};
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error>;

/// Simulated time per step: every event due in a step runs concurrently at its end.
const TICK_MS: u64 = 100;
/// The server's clock at the start (2096: nothing expires by the real clock).
const T0_MS: u64 = 4_000_000_000_000;
/// Legitimate users before the attack starts (the signal's baseline fills).
const WARM_UP_MS: u64 = 60_000;
/// After the attack: how long the signal takes to fall back.
const TAIL_MS: u64 = 150_000;
const LEGIT_USERS: usize = 1_000;
/// Legitimate logins per tick (10 a second).
const LEGIT_PER_TICK: u64 = 1;
const TYPO_RATE: f64 = 0.10;
const TRUSTED_SHARE: f64 = 0.80;
/// A legitimate user gives up after this many attempts (counted as not logged in).
const MAX_TRIES: u32 = 20;
/// The attacked account whose owner logs in every `OWNER_EVERY_MS`.
const OWNER: usize = 7;
const OWNER_EVERY_MS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    None,
    Stuffing,
    /// Stuffing by bots that solve every challenge (a CAPTCHA-solving service): the strict
    /// tier's limits alone.
    StuffingSolving,
    Spraying,
    Lockout,
    SlowBruteForce,
}

impl Attack {
    pub const ALL: [Attack; 6] = [
        Attack::Stuffing,
        Attack::StuffingSolving,
        Attack::Spraying,
        Attack::Lockout,
        Attack::SlowBruteForce,
        Attack::None,
    ];

    fn name(self) -> &'static str {
        match self {
            Attack::None => "none",
            Attack::Stuffing => "stuffing",
            Attack::StuffingSolving => "stuffing_solving_challenges",
            Attack::Spraying => "spraying",
            Attack::Lockout => "lockout",
            Attack::SlowBruteForce => "slow_brute_force",
        }
    }

    /// (attempts, ms between two attempts in µs, accounts attacked), at `scale`.
    fn plan(self, scale: u64) -> (u64, u64, u64) {
        match self {
            Attack::None => (0, 1_000_000, 1),
            Attack::Stuffing | Attack::StuffingSolving => {
                (100_000 / scale, 1_000 * scale, 10_000 / scale)
            }
            Attack::Spraying => (50_000 / scale, 2_000 * scale, 10_000 / scale),
            Attack::Lockout => (10_000 / scale, 10_000 * scale, 1),
            Attack::SlowBruteForce => (60, 30_000_000, 1),
        }
    }

    /// The `i`-th attempt: its account and the address it comes from.
    fn bot(self, i: u64, accounts: u64) -> (u64, String) {
        match self {
            Attack::Stuffing | Attack::StuffingSolving => (
                i % accounts,
                format!("2001:db8:{:x}:{:x}::1", i >> 16, i & 0xffff),
            ),
            Attack::Spraying => {
                let net = i % 1_000;
                let to = format!("198.{}.{}.9", 18 + net / 256, net % 256);
                (i % accounts, to)
            }
            Attack::Lockout => (OWNER as u64, format!("2001:db9:{:x}::1", i % 1_000)),
            Attack::SlowBruteForce | Attack::None => (OWNER as u64, "192.0.2.77".into()),
        }
    }
}

fn account(i: u64) -> String {
    format!("user{i}")
}

/// Each legitimate user's own /24.
fn home(user: usize) -> String {
    format!("100.{}.{}.7", 64 + user / 256, user % 256)
}

/// A number in [0, 1) from a seed (splitmix64): the same run every time.
fn chance(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

#[derive(Clone)]
enum Actor {
    Legit {
        user: usize,
        trusted: bool,
        started: u64,
        waited: u64,
        tries: u32,
        passed: bool,
        challenged: bool,
        seed: u64,
    },
    Owner {
        trusted: bool,
    },
    Bot {
        account: u64,
        from: String,
        solves: bool,
    },
}

enum Done {
    Retry(u64, Actor),
    Legit {
        started: u64,
        waited: u64,
        ok: bool,
        challenged: bool,
    },
    Owner {
        trusted: bool,
        ok: bool,
    },
    Bot {
        evaluated: bool,
    },
}

struct Shared {
    guard: LoginGuard,
    tokens: Vec<Option<String>>,
}

async fn act(s: Arc<Shared>, now: u64, actor: Actor) -> Result<Done, ratelimit_client::Error> {
    let ip = |a: &str| a.parse::<IpAddr>().unwrap_or(IpAddr::from([127, 0, 0, 1]));
    match actor {
        Actor::Bot {
            account: a,
            from,
            solves,
        } => {
            let name = account(a);
            let mut attempt = Attempt {
                account: &name,
                ip: ip(&from),
                device_token: None,
                challenge_passed: false,
            };
            let mut d = s.guard.before(&attempt).await?;
            if d.verdict == Verdict::Challenge && solves {
                attempt.challenge_passed = true;
                d = s.guard.before(&attempt).await?;
            }
            let evaluated = match d.take_ticket() {
                Some(t) => {
                    s.guard.after(t, Outcome::Failure).await?;
                    true
                }
                None => false,
            };
            Ok(Done::Bot { evaluated })
        }
        Actor::Owner { trusted } => {
            let name = account(OWNER as u64);
            let token = if trusted {
                s.tokens[OWNER].as_deref()
            } else {
                None
            };
            let mut attempt = Attempt {
                account: &name,
                ip: ip(&home(OWNER)),
                device_token: token,
                challenge_passed: false,
            };
            let mut d = s.guard.before(&attempt).await?;
            if d.verdict == Verdict::Challenge && !trusted {
                attempt.challenge_passed = true;
                d = s.guard.before(&attempt).await?;
            }
            let ok = match d.take_ticket() {
                Some(t) => {
                    s.guard.after(t, Outcome::Success).await?;
                    true
                }
                None => false,
            };
            Ok(Done::Owner { trusted, ok })
        }
        Actor::Legit {
            user,
            trusted,
            started,
            mut waited,
            tries,
            mut passed,
            mut challenged,
            seed,
        } => {
            let name = account(user as u64);
            let token = if trusted {
                s.tokens[user].as_deref()
            } else {
                None
            };
            let attempt = Attempt {
                account: &name,
                ip: ip(&home(user)),
                device_token: token,
                challenge_passed: passed,
            };
            let mut d = s.guard.before(&attempt).await?;
            let mut retry_at = now;
            if let Some(t) = d.take_ticket() {
                let typo = chance(seed ^ u64::from(tries)) < TYPO_RATE;
                let outcome = if typo {
                    Outcome::Failure
                } else {
                    Outcome::Success
                };
                let after = s.guard.after(t, outcome).await?;
                if !typo {
                    return Ok(Done::Legit {
                        started,
                        waited,
                        ok: true,
                        challenged,
                    });
                }
                let wait = after.retry_after_ms.unwrap_or(0);
                waited += wait;
                retry_at += wait;
            } else if d.verdict == Verdict::Challenge {
                challenged = true;
                passed = true;
            } else {
                let wait = d.retry_after_ms.unwrap_or(0);
                waited += wait;
                retry_at += wait;
            }
            if tries + 1 >= MAX_TRIES {
                return Ok(Done::Legit {
                    started,
                    waited,
                    ok: false,
                    challenged,
                });
            }
            let next = Actor::Legit {
                user,
                trusted,
                started,
                waited,
                tries: tries + 1,
                passed,
                challenged,
                seed,
            };
            Ok(Done::Retry(retry_at.max(now + TICK_MS), next))
        }
    }
}

/// What one attack measured.
pub struct Report {
    attack: Attack,
    attempts: u64,
    evaluated: u64,
    after_trip: (u64, u64),
    signal_after_ms: Option<u64>,
    signal_off_after_ms: Option<u64>,
    owner_trusted: (u64, u64),
    owner_new: (u64, u64),
    legit_added: Vec<u64>,
    legit_failed: u64,
    legit_challenged: u64,
}

impl Report {
    fn percentile(&self, p: usize) -> u64 {
        let mut v = self.legit_added.clone();
        v.sort_unstable();
        v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }

    fn secs(ms: Option<u64>) -> String {
        ms.map_or("-".into(), |ms| format!("{:.1}", ms as f64 / 1000.0))
    }

    /// The line for scripts.
    pub fn line(&self) -> String {
        format!(
            "attack={} evaluated={}/{} signal_after_s={} owner_trusted_ok={}/{} owner_new_device_ok={}/{} legit_p99_added_ms={}",
            self.attack.name(),
            self.evaluated,
            self.attempts,
            Report::secs(self.signal_after_ms),
            self.owner_trusted.0,
            self.owner_trusted.1,
            self.owner_new.0,
            self.owner_new.1,
            self.percentile(99)
        )
    }

    /// The line for people.
    pub fn detail(&self) -> String {
        let (ev, of) = self.after_trip;
        let share = if of == 0 {
            0.0
        } else {
            100.0 * ev as f64 / of as f64
        };
        format!(
            "# {}: {} attempts, {} evaluated; after the signal tripped {ev} of {of} ({share:.2} %); signal on after {} s, off {} s after the attack; owner trusted {}/{}, new device {}/{}; legit sessions {} (p50 {} ms, p99 {} ms added, {} challenged, {} gave up)",
            self.attack.name(),
            self.attempts,
            self.evaluated,
            Report::secs(self.signal_after_ms),
            Report::secs(self.signal_off_after_ms),
            self.owner_trusted.0,
            self.owner_trusted.1,
            self.owner_new.0,
            self.owner_new.1,
            self.legit_added.len(),
            self.percentile(50),
            self.percentile(99),
            self.legit_challenged,
            self.legit_failed,
        )
    }
}

async fn advance(
    conn: &mut MultiplexedConnection,
    clock: &ManualClock,
    ms: u64,
) -> Result<(), BoxError> {
    let _: i64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("ADVANCE")
        .arg(ms)
        .query_async(conn)
        .await?;
    clock.advance(Duration::from_millis(ms));
    Ok(())
}

/// A guard on an emptied store, and a device token for each legitimate user.
async fn setup(
    url: &str,
    conn: &mut MultiplexedConnection,
    clock: &Arc<ManualClock>,
) -> Result<Arc<Shared>, BoxError> {
    let _: () = redis::cmd("FLUSHALL").query_async(conn).await?;
    let _: i64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("SET")
        .arg(T0_MS)
        .query_async(conn)
        .await?;
    let config = Config {
        deadline: Duration::from_secs(1),
        max_deadline: Duration::from_secs(1),
        clock: clock.clone(),
        log_every: 0,
        ..Config::default()
    };
    let limiter = Limiter::new(Store::connect(url).await?, config);
    let mut settings =
        LoginSettings::new(Secret::new(b"bench-login-device-secret-32byte".to_vec())?);
    settings.clock = clock.clone();
    let guard = LoginGuard::new(limiter, settings)?;
    let mut tokens = Vec::with_capacity(LEGIT_USERS);
    for chunk in (0..LEGIT_USERS).collect::<Vec<_>>().chunks(100) {
        let mut set = tokio::task::JoinSet::new();
        for &user in chunk {
            let g = guard.clone();
            set.spawn(async move {
                let name = account(user as u64);
                let ip = home(user).parse().unwrap_or(IpAddr::from([127, 0, 0, 1]));
                let attempt = Attempt {
                    account: &name,
                    ip,
                    device_token: None,
                    challenge_passed: false,
                };
                let mut d = g.before(&attempt).await?;
                let token = match d.take_ticket() {
                    Some(t) => g.after(t, Outcome::Success).await?.device_token,
                    None => None,
                };
                Ok::<_, ratelimit_client::Error>((user, token))
            });
        }
        let mut got: Vec<(usize, Option<String>)> = Vec::new();
        while let Some(r) = set.join_next().await {
            got.push(r??);
        }
        got.sort_by_key(|(u, _)| *u);
        tokens.extend(got.into_iter().map(|(_, t)| t));
    }
    Ok(Arc::new(Shared { guard, tokens }))
}

/// Runs one attack and measures it.
pub async fn simulate(
    url: &str,
    conn: &mut MultiplexedConnection,
    attack: Attack,
    scale: u64,
) -> Result<Report, BoxError> {
    let clock = Arc::new(ManualClock::new(T0_MS * 1_000_000));
    let shared = setup(url, conn, &clock).await?;
    let (attempts, every_us, accounts) = attack.plan(scale);
    let attack_ms = match attack {
        Attack::None => 60_000,
        _ => (attempts * every_us).div_ceil(1_000),
    };
    let (start, stop) = (WARM_UP_MS, WARM_UP_MS + attack_ms);
    let end = stop + if attack == Attack::None { 0 } else { TAIL_MS };
    let mut r = Report {
        attack,
        attempts,
        evaluated: 0,
        after_trip: (0, 0),
        signal_after_ms: None,
        signal_off_after_ms: None,
        owner_trusted: (0, 0),
        owner_new: (0, 0),
        legit_added: Vec::new(),
        legit_failed: 0,
        legit_challenged: 0,
    };
    let mut queue: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut actors: std::collections::HashMap<u64, Actor> = std::collections::HashMap::new();
    let mut seq = 0u64;
    let mut push = |queue: &mut BinaryHeap<Reverse<(u64, u64)>>,
                    actors: &mut std::collections::HashMap<u64, Actor>,
                    at: u64,
                    a: Actor| {
        seq += 1;
        queue.push(Reverse((at, seq)));
        actors.insert(seq, a);
    };
    let (mut next_bot, mut now, mut legit_n) = (0u64, 0u64, 0u64);
    while now < end || !queue.is_empty() && now < end + 600_000 {
        if now < end {
            for _ in 0..LEGIT_PER_TICK {
                legit_n += 1;
                let seed = legit_n.wrapping_mul(0x2545_f491_4f6c_dd1d);
                let user = (chance(seed) * LEGIT_USERS as f64) as usize % LEGIT_USERS;
                let trusted = shared.tokens[user].is_some() && chance(seed ^ 1) < TRUSTED_SHARE;
                let a = Actor::Legit {
                    user,
                    trusted,
                    started: now,
                    waited: 0,
                    tries: 0,
                    passed: false,
                    challenged: false,
                    seed,
                };
                push(&mut queue, &mut actors, now, a);
            }
        }
        while next_bot < attempts && start + next_bot * every_us / 1_000 < now + TICK_MS {
            let (a, from) = attack.bot(next_bot, accounts);
            push(
                &mut queue,
                &mut actors,
                now,
                Actor::Bot {
                    account: a,
                    from,
                    solves: attack == Attack::StuffingSolving,
                },
            );
            next_bot += 1;
        }
        if now >= start && now < stop && (now - start) % OWNER_EVERY_MS == 0 {
            push(&mut queue, &mut actors, now, Actor::Owner { trusted: true });
        }
        if now >= start && now < stop && (now - start) % OWNER_EVERY_MS == OWNER_EVERY_MS / 2 {
            push(
                &mut queue,
                &mut actors,
                now,
                Actor::Owner { trusted: false },
            );
        }
        let mut set = tokio::task::JoinSet::new();
        while let Some(Reverse((at, id))) = queue.peek().copied() {
            if at > now {
                break;
            }
            queue.pop();
            if let Some(a) = actors.remove(&id) {
                set.spawn(act(shared.clone(), now, a));
            }
        }
        let strict_before = shared.guard.signal().tier == Tier::Strict;
        while let Some(done) = set.join_next().await {
            match done?? {
                Done::Retry(at, a) => push(&mut queue, &mut actors, at, a),
                Done::Legit {
                    started,
                    waited,
                    ok,
                    challenged,
                } => {
                    if attack == Attack::None || (started >= start && started < stop) {
                        r.legit_added.push(waited);
                        r.legit_failed += u64::from(!ok);
                        r.legit_challenged += u64::from(challenged);
                    }
                }
                Done::Owner { trusted, ok } => {
                    let o = if trusted {
                        &mut r.owner_trusted
                    } else {
                        &mut r.owner_new
                    };
                    o.0 += u64::from(ok);
                    o.1 += 1;
                }
                Done::Bot { evaluated } => {
                    r.evaluated += u64::from(evaluated);
                    if strict_before {
                        r.after_trip.0 += u64::from(evaluated);
                        r.after_trip.1 += 1;
                    }
                }
            }
        }
        let strict = shared.guard.signal().tier == Tier::Strict;
        if strict && r.signal_after_ms.is_none() && now >= start {
            r.signal_after_ms = Some(now + TICK_MS - start);
        }
        if !strict && r.signal_after_ms.is_some() && r.signal_off_after_ms.is_none() && now >= stop
        {
            r.signal_off_after_ms = Some(now + TICK_MS - stop);
        }
        advance(conn, &clock, TICK_MS).await?;
        now += TICK_MS;
    }
    Ok(r)
}
