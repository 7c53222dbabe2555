//! A gateway fleet sharing one limiter key: N gateway threads, each with its own connection, admit
//! requests either with one `RL.TOKENBUCKET` call each or from a local cache filled by `RL.LEASE`
//! in batches of k (unspent tokens lapse after the lease lifetime, optionally given back with
//! `RL.REFUND`). It prints store calls, admissions, the worst 1-second interval, stranded tokens
//! and rejections the fleet could have served, for even and skewed routing.
//!
//! Time is simulated through the module's debug clock (`RL.DEBUG CLOCK SET`), so the server must
//! be loaded with `DEBUG-CLOCK yes`: `scripts/fleet` starts such a throwaway server. The trace is
//! generated from a fixed seed; the clock stands still within each simulated millisecond while
//! the gateways with work in it call the store, and the main thread moves it on once they have
//! all answered. By default the gateways of one millisecond take turns in an order that rotates
//! with the millisecond, so a run is reproducible to the request; `--concurrent yes` lets them
//! call at once (the same bounds hold; which gateway wins the last token varies run to run).
//! Runs are bounded: one pass over a trace of `--seconds` simulated seconds per row.
//!
//! Usage: `fleet (--port P | --url URL) [--gateways 8] [--limit 1000] [--window-ms 1000] [--burst L]
//!   [--rate 800] [--spike 2500 (0: none)] [--seconds 8] [--lifetime-ms 1000]
//!   [--batches 1,3,10,20] [--refund both|yes|no] [--strict no|yes] [--concurrent no|yes]
//!   [--seed 1]`
//!
//! `--url` takes any of the client's URL forms (`rediss://user:password@host:port/?ca=/ca.pem`,
//! docs/operating.md "Connections"): every connection is the client's `Store`, so TLS and ACL
//! users work as in a gateway; `--port P` is `redis://127.0.0.1:P/`.
//!
//! `--strict yes` makes the leasing gateways lease from a bucket of BURST B − N·k (N gateways,
//! batch k): at most N·k tokens sit in caches, so the fleet keeps the B + L·t/W promise exactly.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;

use ratelimit_client::Store;
use redis::FromRedisValue;

/// One gateway's (or the driver's) connection: the client's `Store` on a runtime of its own, so
/// each gateway thread makes its calls in turn, as the synchronous simulation expects.
struct Connection {
    rt: tokio::runtime::Runtime,
    store: Store,
}

impl Connection {
    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, String> {
        let v = self
            .rt
            .block_on(self.store.query(cmd))
            .map_err(|e| e.to_string())?;
        T::from_redis_value(&v).map_err(|e| e.to_string())
    }
}

/// The simulated epoch (2096): keys' absolute expiries derive from the module clock and so lie
/// beyond the server's real clock; Redis never expires them mid-run.
const T0_MS: u64 = 4_000_000_000_000;

#[derive(Clone)]
struct Opts {
    url: String,
    gateways: usize,
    limit: u64,
    window_ms: u64,
    burst: u64,
    rate: f64,
    spike: f64,
    seconds: u64,
    lifetime_ms: u64,
    batches: Vec<u64>,
    refund: Vec<bool>,
    strict: bool,
    concurrent: bool,
    seed: u64,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts {
            url: String::new(),
            gateways: 8,
            limit: 1000,
            window_ms: 1000,
            burst: 0,
            rate: 800.0,
            spike: 2500.0,
            seconds: 8,
            lifetime_ms: 1000,
            batches: vec![1, 3, 10, 20],
            refund: vec![false, true],
            strict: false,
            concurrent: false,
            seed: 1,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let [name, value] = pair else {
                usage(&format!("{} needs a value", pair[0]))
            };
            let num = || value.parse::<u64>().unwrap_or_else(|_| usage(name));
            match name.as_str() {
                "--port" => {
                    let port = u16::try_from(num()).unwrap_or_else(|_| usage(name));
                    o.url = format!("redis://127.0.0.1:{port}/");
                }
                "--url" => o.url = value.clone(),
                "--gateways" => o.gateways = num() as usize,
                "--limit" => o.limit = num(),
                "--window-ms" => o.window_ms = num(),
                "--burst" => o.burst = num(),
                "--rate" => o.rate = num() as f64,
                "--spike" => o.spike = num() as f64,
                "--seconds" => o.seconds = num(),
                "--lifetime-ms" => o.lifetime_ms = num(),
                "--seed" => o.seed = num(),
                "--batches" => {
                    o.batches = value
                        .split(',')
                        .map(|k| k.parse().unwrap_or_else(|_| usage(name)))
                        .collect()
                }
                "--refund" => {
                    o.refund = match value.as_str() {
                        "no" => vec![false],
                        "yes" => vec![true],
                        "both" => vec![false, true],
                        _ => usage(name),
                    }
                }
                "--strict" => o.strict = yes_no(name, value),
                "--concurrent" => o.concurrent = yes_no(name, value),
                _ => usage(&format!("unknown option {name}")),
            }
        }
        if o.burst == 0 {
            o.burst = o.limit;
        }
        // Bounded runs: at most an hour of simulated time and a sane fleet.
        if o.url.is_empty()
            || !(1..=64).contains(&o.gateways)
            || !(2..=3600).contains(&o.seconds)
            || o.rate > 1e6
            || o.spike > 1e6
            || o.batches.contains(&0)
        {
            usage("need --port or --url; 1..=64 gateways; 2..=3600 seconds; rates <= 10^6/s; batches >= 1");
        }
        o
    }

    /// `L W BURST B` of the shared bucket; under `--strict`, leasing rows hold back N·k of B.
    fn policy(&self, mode: Mode) -> [String; 4] {
        let burst = match mode {
            Mode::Lease { batch, .. } if self.strict => {
                let held = batch.saturating_mul(self.gateways as u64);
                self.burst.saturating_sub(held).max(1)
            }
            _ => self.burst,
        };
        [
            self.limit.to_string(),
            self.window_ms.to_string(),
            "BURST".into(),
            burst.to_string(),
        ]
    }
}

fn yes_no(name: &str, value: &str) -> bool {
    match value {
        "yes" => true,
        "no" => false,
        _ => usage(name),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("fleet: {why}\nsee the top of examples/fleet.rs for the options");
    std::process::exit(2)
}

/// splitmix64: a fixed seed gives the same trace on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Routing {
    Even,
    /// 70% of requests to gateway 0, the rest spread over the others.
    Skewed,
}

/// Requests as (millisecond, gateway): Poisson arrivals at `rate`, with one second at `spike`
/// in the middle of the run.
fn trace(o: &Opts, routing: Routing) -> Vec<(u64, usize)> {
    let mut rng = Rng(o.seed);
    let end_us = o.seconds * 1_000_000;
    let spike = (
        o.seconds / 2 * 1_000_000,
        o.seconds / 2 * 1_000_000 + 1_000_000,
    );
    let (mut t_us, mut out, mut turn) = (0f64, Vec::new(), 0usize);
    loop {
        let in_spike = (spike.0 as f64..spike.1 as f64).contains(&t_us);
        let rate = if in_spike && o.spike > 0.0 {
            o.spike
        } else {
            o.rate
        };
        let next = t_us - (1.0 - rng.unit()).ln() * 1e6 / rate.max(1e-9);
        // Arrivals are memoryless: crossing a phase boundary restarts the draw there.
        let boundary = [spike.0 as f64, spike.1 as f64, end_us as f64]
            .into_iter()
            .find(|&b| t_us < b && next >= b);
        if let Some(b) = boundary {
            t_us = b;
            if b >= end_us as f64 {
                return out;
            }
            continue;
        }
        t_us = next;
        turn += 1;
        let gateway = match routing {
            Routing::Even => turn % o.gateways,
            Routing::Skewed if o.gateways == 1 || rng.unit() < 0.7 => 0,
            Routing::Skewed => 1 + turn % (o.gateways - 1),
        };
        out.push(((t_us / 1000.0) as u64, gateway));
    }
}

#[derive(Clone, Copy)]
enum Mode {
    /// One `RL.TOKENBUCKET` call per request.
    Direct,
    /// Local cache filled by `RL.LEASE … WANT batch`.
    Lease { batch: u64, refund: bool },
}

/// One gateway: its connection and its local view of the shared key.
struct Gateway {
    con: Connection,
    key: String,
    policy: [String; 4],
    mode: Mode,
    lifetime_ms: u64,
    /// Leased tokens not yet spent, and when they lapse.
    cache: u64,
    lapse_at: u64,
    /// After a zero grant: the store has no token before this instant (its retry_after).
    denied_until: u64,
    calls: u64,
    stranded: u64,
    /// Of the stranded tokens, how many RL.REFUND actually gave back (field 1 of its reply).
    given_back: u64,
}

struct Report {
    gateway: usize,
    admitted: u64,
    rejected: u64,
    cache: u64,
    lapse_at: Option<u64>,
}

impl Gateway {
    fn store(&mut self, command: &str, extra: &[String]) -> [i64; 5] {
        self.calls += 1;
        let mut c = redis::cmd(command);
        c.arg(&self.key).arg(&self.policy[..]).arg(extra);
        let v: Vec<i64> = self.con.query(&c).expect("store call");
        v.try_into().expect("five integers")
    }

    /// Serves `requests` arriving at simulated millisecond `now`.
    fn tick(&mut self, now: u64, requests: u64) -> (u64, u64) {
        if self.cache > 0 && now >= self.lapse_at {
            self.stranded += self.cache;
            if let Mode::Lease { refund: true, .. } = self.mode {
                self.calls += 1;
                let r: Vec<i64> = self
                    .con
                    .query(redis::cmd("RL.REFUND").arg(&self.key).arg(self.cache))
                    .expect("RL.REFUND");
                self.given_back += r.first().map_or(0, |&n| u64::try_from(n).unwrap_or(0));
            }
            self.cache = 0;
        }
        let mut admitted = 0;
        for _ in 0..requests {
            let ok = match self.mode {
                Mode::Direct => self.store("RL.TOKENBUCKET", &[])[0] == 1,
                Mode::Lease { .. } if self.cache > 0 => {
                    self.cache -= 1;
                    true
                }
                Mode::Lease { .. } if now < self.denied_until => false,
                Mode::Lease { batch, .. } => {
                    let r = self.store("RL.LEASE", &["WANT".into(), batch.to_string()]);
                    let granted = u64::try_from(r[0]).unwrap_or(0);
                    if granted > 0 {
                        self.cache = granted - 1;
                        self.lapse_at = now + self.lifetime_ms;
                    } else {
                        self.denied_until = now + u64::try_from(r[3]).unwrap_or(1);
                    }
                    granted > 0
                }
            };
            admitted += u64::from(ok);
        }
        (admitted, requests - admitted)
    }
}

struct Row {
    calls: u64,
    admitted: u64,
    worst_second: u64,
    stranded: u64,
    given_back: u64,
    servable_rejections: u64,
}

fn connect(o: &Opts) -> Connection {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| usage(&format!("a runtime: {e}")));
    let shown = ratelimit_client::ConnectionSettings::parse(&o.url)
        .map(|s| s.redacted())
        .unwrap_or_else(|e| usage(&e));
    let store = rt
        .block_on(Store::connect(&o.url))
        .unwrap_or_else(|e| usage(&format!("cannot connect to {shown}: {e}")))
        .with_deadline(std::time::Duration::from_secs(10));
    Connection { rt, store }
}

fn set_clock(c: &Connection, ms: u64) {
    let _: i64 = c
        .query(
            redis::cmd("RL.DEBUG")
                .arg("CLOCK")
                .arg("SET")
                .arg(T0_MS + ms),
        )
        .expect("RL.DEBUG CLOCK SET");
}

fn run_row(o: &Opts, control: &Connection, trace: &[(u64, usize)], mode: Mode, key: &str) -> Row {
    let _: i64 = control.query(redis::cmd("DEL").arg(key)).expect("DEL");
    let (report_tx, reports) = channel::<Report>();
    let mut jobs: Vec<Sender<Option<(u64, u64)>>> = Vec::new();
    let mut workers = Vec::new();
    for g in 0..o.gateways {
        let (tx, rx): (_, Receiver<Option<(u64, u64)>>) = channel();
        jobs.push(tx);
        let mut gw = Gateway {
            con: connect(o),
            key: key.to_string(),
            policy: o.policy(mode),
            mode,
            lifetime_ms: o.lifetime_ms,
            cache: 0,
            lapse_at: 0,
            denied_until: 0,
            calls: 0,
            stranded: 0,
            given_back: 0,
        };
        let report_tx = report_tx.clone();
        workers.push(thread::spawn(move || {
            while let Ok(Some((now, requests))) = rx.recv() {
                let (admitted, rejected) = gw.tick(now, requests);
                let report = Report {
                    gateway: g,
                    admitted,
                    rejected,
                    cache: gw.cache,
                    lapse_at: (gw.cache > 0).then_some(gw.lapse_at),
                };
                if report_tx.send(report).is_err() {
                    break;
                }
            }
            (gw.calls, gw.stranded, gw.given_back)
        }));
    }
    let end = o.seconds * 1000;
    let mut admitted_at = vec![0u64; end as usize + 1];
    let (mut cache, mut lapse) = (vec![0u64; o.gateways], vec![None::<u64>; o.gateways]);
    let (mut next, mut servable) = (0usize, 0u64);
    // After the last request the clock runs on until every lease has lapsed, so tokens still
    // cached at the end are stranded (and refunded) like any others.
    loop {
        // The next instant with work: a request, or a lease lapsing.
        let t_req = trace.get(next).map(|r| r.0);
        let Some(now) = lapse.iter().flatten().copied().chain(t_req).min() else {
            break;
        };
        set_clock(control, now);
        let mut requests = vec![0u64; o.gateways];
        while let Some(&(_, g)) = trace.get(next).filter(|r| r.0 == now) {
            requests[g] += 1;
            next += 1;
        }
        // Who goes first within a millisecond rotates, so no gateway is always first in line.
        let due: Vec<usize> = (0..o.gateways)
            .map(|i| (i + now as usize) % o.gateways)
            .filter(|&g| requests[g] > 0 || lapse[g].is_some_and(|at| at <= now))
            .collect();
        let (mut busy, mut rejected) = (0, 0);
        let mut take = |r: Report| {
            if let Some(n) = admitted_at.get_mut(now as usize) {
                *n += r.admitted;
            }
            rejected += r.rejected;
            cache[r.gateway] = r.cache;
            lapse[r.gateway] = r.lapse_at;
        };
        for g in due {
            jobs[g]
                .send(Some((now, requests[g])))
                .expect("worker alive");
            if o.concurrent {
                busy += 1;
            } else {
                take(reports.recv().expect("worker report"));
            }
        }
        for _ in 0..busy {
            take(reports.recv().expect("worker report"));
        }
        if rejected > 0 {
            // The clock still stands at `now`: whatever the bucket and the other gateways' caches
            // hold at this instant could have served these rejections.
            let peek: Vec<i64> = control
                .query(
                    redis::cmd("RL.TOKENBUCKET")
                        .arg(key)
                        .arg(&o.policy(mode)[..])
                        .arg("COST")
                        .arg(0),
                )
                .expect("peek");
            let in_bucket = u64::try_from(peek[2]).unwrap_or(0);
            servable += rejected.min(in_bucket + cache.iter().sum::<u64>());
        }
    }
    for tx in &jobs {
        let _ = tx.send(None);
    }
    let (mut calls, mut stranded, mut given_back) = (0, 0, 0);
    for w in workers {
        let (c, s, b) = w.join().expect("worker");
        calls += c;
        stranded += s;
        given_back += b;
    }
    Row {
        calls,
        admitted: admitted_at.iter().sum(),
        worst_second: worst_closed_interval(&admitted_at, 1000),
        stranded,
        given_back,
        servable_rejections: servable,
    }
}

/// Most admissions in any closed interval [a, a + len] of milliseconds.
fn worst_closed_interval(per_ms: &[u64], len: usize) -> u64 {
    let (mut sum, mut worst) = (0u64, 0u64);
    for (i, &n) in per_ms.iter().enumerate() {
        sum += n;
        if i > len {
            sum -= per_ms[i - len - 1];
        }
        worst = worst.max(sum);
    }
    worst
}

fn main() {
    let o = Opts::parse();
    let control = connect(&o);
    let debug: Result<i64, String> = control.query(redis::cmd("RL.DEBUG").arg("CLOCK").arg("GET"));
    if let Err(e) = debug {
        usage(&format!("the server needs the module loaded with DEBUG-CLOCK yes ({e}); scripts/fleet starts one"));
    }
    let secs = o.seconds as f64;
    println!(
        "policy L={} per W={} ms, BURST B={} (B + L·1000/W = {}); {} gateways; lease lifetime {} ms",
        o.limit,
        o.window_ms,
        o.burst,
        o.burst + o.limit * 1000 / o.window_ms,
        o.gateways,
        o.lifetime_ms
    );
    let spike = if o.spike > 0.0 {
        format!(" with 1 s at {}/s from t = {} s", o.spike, o.seconds / 2)
    } else {
        String::new()
    };
    println!(
        "trace: {} s of Poisson arrivals at {}/s{spike}; seed {}; {}{}\n",
        o.seconds,
        o.rate,
        o.seed,
        if o.concurrent {
            "gateways call at once within a ms"
        } else {
            "gateways take turns within a ms"
        },
        if o.strict {
            "; leases from BURST B - N*k"
        } else {
            ""
        }
    );
    println!(
        "| routing | store calls | refund | offered/s | store calls/s | admitted/s | worst 1 s | stranded (given back) | rejected, servable |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    let mut row_id = 0;
    for routing in [Routing::Even, Routing::Skewed] {
        let t = trace(&o, routing);
        let mut modes = vec![Mode::Direct];
        for &batch in &o.batches {
            for &refund in &o.refund {
                modes.push(Mode::Lease { batch, refund });
            }
        }
        for mode in modes {
            row_id += 1;
            let r = run_row(&o, &control, &t, mode, &format!("fleet:{row_id}"));
            let (how, refund) = match mode {
                Mode::Direct => ("RL.TOKENBUCKET per request".to_string(), "-"),
                Mode::Lease { batch, refund } => (
                    format!("RL.LEASE k={batch}"),
                    if refund { "yes" } else { "no" },
                ),
            };
            println!(
                "| {} | {how} | {refund} | {:.0} | {:.0} | {:.0} | {} | {} ({}) | {} |",
                if routing == Routing::Even {
                    "even"
                } else {
                    "skewed 70%"
                },
                t.len() as f64 / secs,
                r.calls as f64 / secs,
                r.admitted as f64 / secs,
                r.worst_second,
                r.stranded,
                r.given_back,
                r.servable_rejections
            );
        }
    }
    let _: Result<i64, String> = control.query(redis::cmd("RL.DEBUG").arg("CLOCK").arg("REAL"));
}
