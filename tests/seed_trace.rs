//! The seed's table, reproduced through Redis by `scripts/seed-trace` (examples/seed_trace.rs,
//! included here): every number of the seed's run, and RL.GCRA admitting exactly what the token
//! bucket admits.

#[path = "../examples/seed_trace.rs"]
#[allow(dead_code)]
mod seed_trace;
mod support;

use support::*;

#[test]
fn every_number_of_the_seed_table() {
    let s = Server::start();
    let mut c = s.connect();
    let table = seed_trace::table(&mut c, "seed").unwrap();
    let numbers: Vec<_> = table
        .rows
        .iter()
        .map(|r| {
            let n = (r.steady, r.edge, r.overload, r.total(), r.worst_second());
            (r.name, n)
        })
        .collect();
    assert_eq!(
        numbers,
        [
            ("fixed window", (10, 20, 20, 50, 20)),
            ("sliding log", (10, 10, 20, 40, 10)),
            ("sliding counter", (10, 11, 20, 41, 11)),
            ("token bucket", (10, 11, 29, 50, 19)),
        ]
    );
    assert_eq!(
        (table.burst_20.edge, table.burst_20.worst_second()),
        (21, 21)
    );
    let token_bucket = &table.rows[3];
    assert_eq!(table.gcra.admitted, token_bucket.admitted);
    // The keys are gone and the module's clock is real again.
    assert_eq!(cmd(&mut c, &["DBSIZE"]).unwrap(), Value::Int(0));
    let now: u64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert!(now < seed_trace::T0_MS);

    let printed = seed_trace::render(&table);
    println!("{printed}");
    assert_eq!(
        printed,
        "\
offered: 80 requests  steady=10  edge=30  overload=40
limit:   10 per 1000 ms, through Redis (module clock at 4000000000000 + t ms)

algorithm        steady  edge overload  total  worst 1s  command
fixed window         10    20       20     50        20  RL.FIXEDWINDOW key 10 1000
sliding log          10    10       20     40        10  RL.SLIDINGLOG key 10 1000
sliding counter      10    11       20     41        11  RL.SLIDINGCOUNTER key 10 1000
token bucket         10    11       29     50        19  RL.TOKENBUCKET key 10 1000

token bucket, BURST 20 (same long-run rate, bigger burst):
  edge accepted 21, worst 1s 21
RL.GCRA key 10 1000 BURST 10 (emission interval 100 ms, tolerance 900 ms) admits exactly the requests the token bucket admits: yes
"
    );
}

/// The module's T0 for the trace is the tests' own, so expiries behave the same way.
#[test]
fn the_trace_starts_where_the_tests_pin_the_clock() {
    assert_eq!(seed_trace::T0_MS, T0_MS);
    assert_eq!(seed_trace::bursty_trace().len(), 80);
}
