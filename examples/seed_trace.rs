//! The seed's table, through Redis: the bursty trace of the seed `000_b4ddb036768dbd4f.txt`
//! ("Code": 10 steady requests, 30 around the window boundary at t = 3 s, 40 of overload) fed to
//! every limiter command with L = 10, W = 1000 ms, counting what each admits.
//!
//! `scripts/seed-trace [host] [port]` runs it (default 127.0.0.1, port `$PORT` as `make run`
//! takes it, else 6379). The server's module must
//! be loaded with `DEBUG-CLOCK yes`: each request is sent at its trace instant t, with the
//! module's clock pinned at `T0_MS + t` by `RL.DEBUG CLOCK SET`. `tests/seed_trace.rs` includes
//! this file and asserts every number.

use std::fmt::Write;

/// Where the trace's t = 0 lies on the module's clock: far in the future, so that keys' absolute
/// expiries lie beyond the server's real clock and Redis never expires them mid-run, and a
/// multiple of W so the windows fall where the seed's do.
pub const T0_MS: u64 = 4_000_000_000_000;
/// The seed's limit: 10 requests per 1000 ms.
const L: &str = "10";
const W: u64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Steady,
    Edge,
    Overload,
}

/// The seed's `bursty_trace()`: (t in ms, phase).
pub fn bursty_trace() -> Vec<(u64, Phase)> {
    let steady = (0..2000).step_by(200).map(|t| (t, Phase::Steady));
    let edge = (0..15)
        .map(|i| (2900 + 6 * i, Phase::Edge))
        .chain((0..15).map(|i| (3000 + 6 * i, Phase::Edge)));
    let overload = (4000..6000).step_by(50).map(|t| (t, Phase::Overload));
    steady.chain(edge).chain(overload).collect()
}

/// What one limiter admitted of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub command: String,
    /// The trace instants admitted, in order.
    pub admitted: Vec<u64>,
    pub steady: usize,
    pub edge: usize,
    pub overload: usize,
}

impl Row {
    pub fn total(&self) -> usize {
        self.admitted.len()
    }

    /// Most admitted in any 1000 ms interval, aligned or not: (t − W, t] around each admission.
    pub fn worst_second(&self) -> usize {
        let (mut best, mut lo) = (0, 0);
        for (hi, &t) in self.admitted.iter().enumerate() {
            while self.admitted[lo] + W <= t {
                lo += 1;
            }
            best = best.max(hi - lo + 1);
        }
        best
    }
}

/// Every row of the seed's table, plus the token bucket with BURST 20 and RL.GCRA.
pub struct Table {
    pub rows: Vec<Row>,
    pub burst_20: Row,
    pub gcra: Row,
}

/// Feeds the trace to `command key L W [options]` on a fresh key, each request at its instant.
pub fn run(
    con: &mut redis::Connection,
    name: &'static str,
    command: &str,
    options: &[&str],
    key: &str,
) -> redis::RedisResult<Row> {
    redis::cmd("DEL").arg(key).query::<()>(con)?;
    let mut row = Row {
        name,
        command: [command, L, &W.to_string()]
            .iter()
            .chain(options)
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
        admitted: Vec::new(),
        steady: 0,
        edge: 0,
        overload: 0,
    };
    for (t, phase) in bursty_trace() {
        let (_, reply): (i64, Vec<i64>) = redis::pipe()
            .cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("SET")
            .arg(T0_MS + t)
            .cmd(command)
            .arg(key)
            .arg(L)
            .arg(W)
            .arg(options)
            .query(con)?;
        if reply.first() == Some(&1) {
            row.admitted.push(t);
            *match phase {
                Phase::Steady => &mut row.steady,
                Phase::Edge => &mut row.edge,
                Phase::Overload => &mut row.overload,
            } += 1;
        }
    }
    redis::cmd("DEL").arg(key).query::<()>(con)?;
    Ok(row)
}

/// Runs every limiter on keys named after `prefix`, then gives the module its real clock back.
pub fn table(con: &mut redis::Connection, prefix: &str) -> redis::RedisResult<Table> {
    // Fails before any request is sent when the module was loaded without the debug clock.
    redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("GET")
        .query::<i64>(con)?;
    let mut key = 0;
    let mut feed = |con: &mut redis::Connection, name, command, options: &[&str]| {
        key += 1;
        run(con, name, command, options, &format!("{prefix}:{key}"))
    };
    let rows = vec![
        feed(con, "fixed window", "RL.FIXEDWINDOW", &[])?,
        feed(con, "sliding log", "RL.SLIDINGLOG", &[])?,
        feed(con, "sliding counter", "RL.SLIDINGCOUNTER", &[])?,
        feed(con, "token bucket", "RL.TOKENBUCKET", &[])?,
    ];
    let burst_20 = feed(con, "token bucket", "RL.TOKENBUCKET", &["BURST", "20"])?;
    let gcra = feed(con, "GCRA", "RL.GCRA", &["BURST", "10"])?;
    redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("REAL")
        .query::<i64>(con)?;
    Ok(Table {
        rows,
        burst_20,
        gcra,
    })
}

/// The table as the seed prints it, with the command that produced each row.
pub fn render(table: &Table) -> String {
    let trace = bursty_trace();
    let offered = |p| trace.iter().filter(|(_, q)| *q == p).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "offered: {} requests  steady={}  edge={}  overload={}",
        trace.len(),
        offered(Phase::Steady),
        offered(Phase::Edge),
        offered(Phase::Overload)
    );
    let _ = writeln!(
        out,
        "limit:   {L} per {W} ms, through Redis (module clock at {T0_MS} + t ms)\n"
    );
    let _ = writeln!(
        out,
        "{:<16}{:>7}{:>6}{:>9}{:>7}{:>10}  command",
        "algorithm", "steady", "edge", "overload", "total", "worst 1s"
    );
    for r in &table.rows {
        let _ = writeln!(
            out,
            "{:<16}{:>7}{:>6}{:>9}{:>7}{:>10}  {}",
            r.name,
            r.steady,
            r.edge,
            r.overload,
            r.total(),
            r.worst_second(),
            r.command.replacen(' ', " key ", 1)
        );
    }
    let b = &table.burst_20;
    let _ = writeln!(
        out,
        "\ntoken bucket, BURST 20 (same long-run rate, bigger burst):\n  edge accepted {}, worst 1s {}",
        b.edge,
        b.worst_second()
    );
    let same = table
        .rows
        .iter()
        .find(|r| r.command.starts_with("RL.TOKENBUCKET"))
        .is_some_and(|tb| tb.admitted == table.gcra.admitted);
    let _ = writeln!(
        out,
        "{} (emission interval 100 ms, tolerance 900 ms) admits exactly the requests the token bucket admits: {}",
        table.gcra.command.replacen(' ', " key ", 1),
        if same { "yes" } else { "NO" }
    );
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let host = args.next().unwrap_or_else(|| "127.0.0.1".into());
    let port = args
        .next()
        .or_else(|| std::env::var("PORT").ok().filter(|p| !p.is_empty()))
        .unwrap_or_else(|| "6379".into());
    let result = redis::Client::open(format!("redis://{host}:{port}/"))
        .and_then(|client| client.get_connection())
        .and_then(|mut con| table(&mut con, &format!("seed-trace:{}", std::process::id())));
    match result {
        Ok(table) => print!("{}", render(&table)),
        Err(e) => {
            eprintln!(
                "seed-trace: {e}\n(needs redis-server on {host}:{port} with the module loaded with \
                 DEBUG-CLOCK yes, e.g. `make run ARGS=\"DEBUG-CLOCK yes\"`)"
            );
            std::process::exit(1);
        }
    }
}
