//! One table of argument errors over every command: each row fails with a clear error that names
//! the argument, and no row changes any key (names, DUMPs and expiries are compared after each).
//! A new command adds its rows here.

mod support;
use support::*;

/// How an error must read.
enum Text {
    /// Exactly this.
    Is(&'static str),
    /// Containing this.
    Has(&'static str),
}
use Text::{Has, Is};

/// Stands for an argument of 5000 nines, which the error echoes cut short.
const HUGE: &str = "<5000 nines>";

/// The keys the rows find: each command family has its own, in the state its rows expect; `tb`
/// and `lease` stay missing.
const SETUP: &[&[&str]] = &[
    &["RL.GCRA", "gcra", "10", "1000"],
    &["RL.SLIDINGLOG", "log", "10", "1000"],
    &["RL.SLIDINGCOUNTER", "counter", "10", "1000"],
    &["RL.FIXEDWINDOW", "window", "10", "1000"],
    &["RL.TOKENBUCKET", "refund", "10", "1000"],
    &["RL.SHAPE", "shape", "1", "1000", "QUEUE", "5"],
    &["RL.CONCURRENCY", "conc", "2", "1000", "ACQUIRE", "a"],
    &["SET", "str", "x"],
    &["LPUSH", "list", "x"],
];

#[rustfmt::skip]
const CASES: &[(&[&str], Text)] = &[
    // RL.ALL: numkeys, the keys, one limiter per key, each with its own command's rules.
    (&["RL.ALL", "0", "gcra", "GCRA", "10", "1000"], Has("ERR invalid numkeys '0': expected an integer from 1 to 32")),
    (&["RL.ALL", "33", "gcra", "GCRA", "10", "1000"], Has("invalid numkeys '33'")),
    (&["RL.ALL", "2", "gcra", "gcra", "GCRA", "10", "1000", "GCRA", "10", "1000"], Is("ERR key 'gcra' is named twice; each key has one limiter")),
    (&["RL.ALL", "2", "gcra", "log", "GCRA", "10", "1000"], Is("ERR no limiter for key 'log': expected 2 limiters, one per key")),
    (&["RL.ALL", "1", "gcra", "GCRA", "10", "1000", "GCRA", "10", "1000"], Is("ERR more limiters than keys: numkeys is 1")),
    (&["RL.ALL", "1", "gcra", "LEAKY", "10", "1000"], Has("ERR unknown algorithm 'LEAKY'")),
    (&["RL.ALL", "1", "log", "SLIDINGLOG", "10", "1000", "BURST", "20"], Has("unknown option 'BURST'")),
    (&["RL.ALL", "1", "gcra", "GCRA", "10", "1000", "COST", "11"], Has("COST 11 can never be admitted")),
    (&["RL.ALL", "1", "log", "GCRA", "10", "1000"], Is("WRONGTYPE the key 'log' holds a sliding log limiter, not a GCRA limiter; use another key or DEL it")),
    // RL.SETTLE: RL.ALL's limiters, each ending with BY d.
    (&["RL.SETTLE", "1", "gcra", "GCRA", "10", "1000"], Has("wrong number of arguments")),
    (&["RL.SETTLE", "1", "gcra", "GCRA", "10", "1000", "COST", "5"], Is("ERR RL.SETTLE takes BY d, not COST: the request was already decided")),
    (&["RL.SETTLE", "1", "gcra", "GCRA", "10", "1000", "BURST", "5", "BY"], Is("ERR option BY needs a value")),
    (&["RL.SETTLE", "1", "gcra", "GCRA", "10", "1000", "BY", "x"], Is("ERR invalid BY 'x': expected an integer from -1000000000000 to 1000000000000")),
    (&["RL.SETTLE", "1", "gcra", "GCRA", "10", "1000", "BY", "-1000000000001"], Is("ERR invalid BY '-1000000000001': expected an integer from -1000000000000 to 1000000000000")),
    (&["RL.SETTLE", "2", "gcra", "x", "GCRA", "10", "1000", "BY", "1"], Is("ERR no limiter for key 'x': expected 2 limiters, one per key")),
    (&["RL.SETTLE", "1", "log", "GCRA", "10", "1000", "BY", "1"], Is("WRONGTYPE the key 'log' holds a sliding log limiter, not a GCRA limiter; use another key or DEL it")),
    (&["RL.ALL", "1", "str", "GCRA", "10", "1000"], Has("WRONGTYPE the key 'str' holds a string")),
    (&["RL.ALL", "1", "gcra", "GCRA", "10"], Has("wrong number of arguments")),
    (&["RL.ALL", "x", "gcra", "GCRA", "10", "1000"], Is("ERR invalid numkeys 'x': expected an integer from 1 to 32")),
    (&["RL.ALL", "1", "gcra", "GCRA", "10", "1000", "WANT", "1"], Is("ERR unknown option 'WANT'; expected BURST or COST")),
    (&["RL.ALL"], Has("wrong number of arguments")),
    // RL.GCRA: L, W, BURST, COST, the options, arity, other types.
    (&["RL.GCRA", "gcra", "abc", "1000"], Has("ERR invalid L 'abc': expected an integer from 1 to 1000000000000")),
    (&["RL.GCRA", "gcra", "0", "1000"], Has("invalid L '0'")),
    (&["RL.GCRA", "gcra", "-1", "1000"], Has("invalid L '-1'")),
    (&["RL.GCRA", "gcra", "1.5", "1000"], Has("invalid L '1.5'")),
    (&["RL.GCRA", "gcra", " 1", "1000"], Has("invalid L ' 1'")),
    (&["RL.GCRA", "gcra", "+1", "1000"], Has("invalid L '+1'")),
    (&["RL.GCRA", "gcra", "1e3", "1000"], Has("invalid L '1e3'")),
    (&["RL.GCRA", "gcra", "", "1000"], Has("invalid L ''")),
    (&["RL.GCRA", "gcra", "18446744073709551616", "1000"], Has("invalid L")),
    (&["RL.GCRA", "gcra", "1000000000001", "1000"], Has("invalid L")),
    (&["RL.GCRA", "gcra", HUGE, "1000"], Has("invalid L '99999999999999999999999999999999...'")),
    (&["RL.GCRA", "gcra", "10", "0"], Has("invalid W '0'")),
    (&["RL.GCRA", "gcra", "10", "-1000"], Has("invalid W")),
    (&["RL.GCRA", "gcra", "10", "1000000000001"], Has("invalid W")),
    (&["RL.GCRA", "gcra", "10", "9223372036854775808"], Has("invalid W")),
    (&["RL.GCRA", "gcra", "10", "1000", "BURST"], Has("ERR option BURST needs a value")),
    (&["RL.GCRA", "gcra", "10", "1000", "COST"], Has("ERR option COST needs a value")),
    (&["RL.GCRA", "gcra", "10", "1000", "BURST", "0"], Has("invalid BURST '0'")),
    (&["RL.GCRA", "gcra", "10", "1000", "BURST", "x"], Has("invalid BURST 'x'")),
    (&["RL.GCRA", "gcra", "10", "1000", "COST", "-1"], Has("invalid COST '-1'")),
    (&["RL.GCRA", "gcra", "10", "1000", "COST", "11"], Has("ERR COST 11 can never be admitted: it exceeds the capacity 10")),
    (&["RL.GCRA", "gcra", "10", "1000", "BURST", "3", "COST", "4"], Has("exceeds the capacity 3")),
    (&["RL.GCRA", "gcra", "10", "1000", "COST", "1", "COST", "1"], Has("ERR option COST given more than once")),
    (&["RL.GCRA", "gcra", "10", "1000", "BURST", "5", "burst", "5"], Has("ERR option BURST given more than once")),
    (&["RL.GCRA", "gcra", "10", "1000", "FOO", "1"], Has("ERR unknown option 'FOO'; expected BURST or COST")),
    (&["RL.GCRA", "gcra", "10", "1000", "WANT", "1"], Has("unknown option 'WANT'")),
    (&["RL.GCRA", "gcra", "10", "1000", "\r\nSET", "1"], Has("unknown option '??SET'")),
    (&["RL.GCRA", "gcra", "1", "1000000000000", "BURST", "2"], Has("takes longer than")),
    (&["RL.GCRA", "gcra", "10"], Has("wrong number of arguments")),
    (&["RL.GCRA", "gcra"], Has("wrong number of arguments")),
    (&["RL.GCRA"], Has("wrong number of arguments")),
    (&["RL.GCRA", "str", "10", "1000"], Has("WRONGTYPE the key holds a string, not a GCRA limiter")),
    (&["RL.GCRA", "list", "10", "1000", "COST", "0"], Has("WRONGTYPE the key holds a list")),
    // RL.TOKENBUCKET
    (&["RL.TOKENBUCKET", "tb", "x", "1"], Has("ERR invalid L 'x'")),
    (&["RL.TOKENBUCKET", "tb", "1", "1", "BURST", "1", "COST", "2"], Has("ERR COST 2 can never be admitted")),
    (&["RL.TOKENBUCKET", "tb", "1", "1", "WANT", "2"], Has("ERR unknown option 'WANT'")),
    (&["RL.TOKENBUCKET", "tb", "1"], Has("wrong number of arguments")),
    // RL.SLIDINGLOG
    (&["RL.SLIDINGLOG", "log", "10", "1000", "BURST", "10"], Has("ERR unknown option 'BURST'; expected COST")),
    (&["RL.SLIDINGLOG", "log", "0", "1000"], Has("ERR invalid L '0'")),
    (&["RL.SLIDINGLOG", "log", "1000000000000", "1000"], Has("is above ratelimit.max-log-entries")),
    (&["RL.SLIDINGLOG", "log", "10", ""], Has("ERR invalid W ''")),
    (&["RL.SLIDINGLOG", "log", "10", "1000", "COST", "11"], Has("ERR COST 11 can never be admitted: it exceeds the capacity 10")),
    (&["RL.SLIDINGLOG", "log", "10", "1000", "COST", "1.5"], Has("ERR invalid COST '1.5'")),
    (&["RL.SLIDINGLOG", "log", "10", "1000", "COST"], Has("ERR option COST needs a value")),
    (&["RL.SLIDINGLOG"], Has("wrong number of arguments")),
    // RL.SLIDINGCOUNTER
    (&["RL.SLIDINGCOUNTER", "counter", "10", "1000", "BURST", "5"], Has("ERR unknown option 'BURST'; expected COST")),
    (&["RL.SLIDINGCOUNTER", "counter", "abc", "1000"], Has("ERR invalid L 'abc'")),
    (&["RL.SLIDINGCOUNTER", "counter", "10", "-5"], Has("ERR invalid W '-5'")),
    (&["RL.SLIDINGCOUNTER", "counter", "10", "1000", "COST", "11"], Has("ERR COST 11 can never be admitted: it exceeds the capacity 10")),
    (&["RL.SLIDINGCOUNTER", "counter", "10", "1000", "COST", "2", "COST", "1"], Has("ERR option COST given more than once")),
    (&["RL.SLIDINGCOUNTER", "counter", "10", "1000", "COST"], Has("ERR option COST needs a value")),
    (&["RL.SLIDINGCOUNTER", "counter"], Has("wrong number of arguments")),
    // RL.FIXEDWINDOW
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "BURST", "5"], Has("ERR unknown option 'BURST'; expected COST")),
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "WANT", "1"], Has("ERR unknown option 'WANT'; expected COST")),
    (&["RL.FIXEDWINDOW", "window", "0", "1000"], Has("ERR invalid L '0': expected an integer from 1 to 1000000000000")),
    (&["RL.FIXEDWINDOW", "window", "-1", "1000"], Has("ERR invalid L '-1'")),
    (&["RL.FIXEDWINDOW", "window", "1000000000001", "1000"], Has("ERR invalid L")),
    (&["RL.FIXEDWINDOW", "window", "10", "0"], Has("ERR invalid W '0': expected an integer from 1 to 1000000000000")),
    (&["RL.FIXEDWINDOW", "window", "10", "1e3"], Has("ERR invalid W '1e3'")),
    (&["RL.FIXEDWINDOW", "window", "10", HUGE], Has("ERR invalid W '99999999999999999999999999999999...'")),
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "COST", "11"], Has("ERR COST 11 can never be admitted: it exceeds the capacity 10")),
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "COST", "-1"], Has("ERR invalid COST '-1'")),
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "COST", "1", "cost", "1"], Has("ERR option COST given more than once")),
    (&["RL.FIXEDWINDOW", "window", "10", "1000", "COST"], Has("ERR option COST needs a value")),
    (&["RL.FIXEDWINDOW", "window", "10"], Has("wrong number of arguments")),
    // RL.LEASE
    (&["RL.LEASE", "lease", "1", "1", "WANT", "0"], Has("ERR invalid WANT '0': expected an integer from 1 to 1000000000000")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "-3"], Has("ERR invalid WANT '-3': expected an integer from 1 to 1000000000000")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "1.5"], Has("ERR invalid WANT '1.5': expected an integer from 1 to 1000000000000")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "1000000000001"], Has("ERR invalid WANT '1000000000001': expected an integer from 1 to 1000000000000")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "99999999999999999999999"], Has("ERR invalid WANT")),
    (&["RL.LEASE", "lease", "x", "1", "WANT", "1"], Has("ERR invalid L 'x'")),
    (&["RL.LEASE", "lease", "1", "0", "WANT", "1"], Has("ERR invalid W '0'")),
    (&["RL.LEASE", "lease", "1", "1", "BURST", "0", "WANT", "1"], Has("ERR invalid BURST '0'")),
    (&["RL.LEASE", "lease", "1", "1", "BURST", "2"], Has("ERR WANT n is required")),
    (&["RL.LEASE", "lease", "1", "1", "COST", "1"], Has("ERR unknown option 'COST'; expected BURST or WANT")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "1", "WANT", "2"], Has("ERR option WANT given more than once")),
    (&["RL.LEASE", "lease", "1", "1", "WANT", "1", "BURST"], Has("ERR option BURST needs a value")),
    (&["RL.LEASE", "lease", "1", "1", "WANT"], Has("wrong number of arguments")),
    (&["RL.LEASE", "lease", "1", "1000000000000", "BURST", "1000000000000", "WANT", "1"], Has("ERR a capacity of")),
    // RL.REFUND: n, exactly.
    (&["RL.REFUND", "refund", "0"], Is("ERR invalid n '0': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", "-1"], Is("ERR invalid n '-1': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", "abc"], Is("ERR invalid n 'abc': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", "1.5"], Is("ERR invalid n '1.5': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", ""], Is("ERR invalid n '': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", " 1"], Is("ERR invalid n ' 1': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", "1000000000001"], Is("ERR invalid n '1000000000001': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund", "99999999999999999999999"], Is("ERR invalid n '99999999999999999999999': expected an integer from 1 to 1000000000000")),
    (&["RL.REFUND", "refund"], Has("wrong number of arguments")),
    (&["RL.REFUND", "refund", "1", "2"], Has("wrong number of arguments")),
    (&["RL.REFUND"], Has("wrong number of arguments")),
    // RL.CHARGE: n, then an optional POLICY for a key that does not exist.
    (&["RL.CHARGE", "charge", "0"], Is("ERR invalid n '0': expected an integer from 1 to 1000000000000")),
    (&["RL.CHARGE", "charge", "-5"], Is("ERR invalid n '-5': expected an integer from 1 to 1000000000000")),
    (&["RL.CHARGE", "charge", "1000000000001"], Is("ERR invalid n '1000000000001': expected an integer from 1 to 1000000000000")),
    (&["RL.CHARGE", "charge", "1", "2"], Is("ERR unknown option '2'; expected POLICY")),
    (&["RL.CHARGE", "charge", "1", "POLICY"], Is("ERR option POLICY needs a value")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "SHAPE", "10", "1000"], Is("ERR unknown algorithm 'SHAPE'; expected one of GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER, FIXEDWINDOW")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "GCRA", "10"], Has("wrong number of arguments")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "GCRA", "0", "1000"], Has("ERR invalid L '0'")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "GCRA", "10", "1000", "COST", "5"], Is("ERR unknown option 'COST'; expected BURST (the cost is n)")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "FIXEDWINDOW", "10", "1000", "BURST", "5"], Is("ERR unknown option 'BURST'; the policy ends at W (the cost is n)")),
    (&["RL.CHARGE", "charge", "1", "POLICY", "GCRA", "10", "1000", "BURST", "5", "BURST", "5"], Is("ERR option BURST given more than once")),
    (&["RL.CHARGE", "charge"], Has("wrong number of arguments")),
    // RL.SHAPE: QUEUE, DELAY and NODELAY, COST within the queue + 1, its own type.
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "2", "DELAY", "3"], Is("ERR DELAY 3 is above QUEUE 2: at most the whole queue goes undelayed")),
    (&["RL.SHAPE", "shape", "1", "1000", "DELAY", "1"], Is("ERR DELAY 1 is above QUEUE 0: at most the whole queue goes undelayed")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "5", "DELAY", "1", "NODELAY"], Is("ERR DELAY d and NODELAY are exclusive (NODELAY is DELAY equal to QUEUE)")),
    (&["RL.SHAPE", "shape", "1", "1000", "NODELAY", "nodelay"], Is("ERR option NODELAY given more than once")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "5", "COST", "7"], Is("ERR COST 7 can never be admitted: it exceeds the capacity 6")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "-1"], Is("ERR invalid QUEUE '-1': expected an integer from 0 to 999999999999")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "1000000000000"], Has("ERR invalid QUEUE '1000000000000'")),
    (&["RL.SHAPE", "shape", "1", "1000", "DELAY", "x"], Has("ERR invalid DELAY 'x'")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE", "1", "QUEUE", "1"], Is("ERR option QUEUE given more than once")),
    (&["RL.SHAPE", "shape", "1", "1000", "BURST", "5"], Is("ERR unknown option 'BURST'; expected QUEUE, DELAY, NODELAY or COST")),
    (&["RL.SHAPE", "shape", "1", "1000", "QUEUE"], Is("ERR option QUEUE needs a value")),
    (&["RL.SHAPE", "shape", "0", "1000"], Has("ERR invalid L '0'")),
    (&["RL.SHAPE", "shape", "1", "1000000000000", "QUEUE", "5"], Has("takes longer than")),
    (&["RL.SHAPE", "gcra", "10", "1000"], Is("WRONGTYPE the key holds a GCRA limiter, not a leaky bucket limiter; use another key or DEL it")),
    (&["RL.GCRA", "shape", "1", "1000"], Is("WRONGTYPE the key holds a leaky bucket limiter, not a GCRA limiter; use another key or DEL it")),
    (&["RL.SHAPE", "shape", "1"], Has("wrong number of arguments")),
    // RL.CONCURRENCY: N within the holder cap, TTL like W, one operation, an id of bounded length.
    (&["RL.CONCURRENCY", "conc", "abc", "1000", "PEEK"], Is("ERR invalid N 'abc': expected an integer from 1 to 1000")),
    (&["RL.CONCURRENCY", "conc", "0", "1000", "PEEK"], Has("ERR invalid N '0'")),
    (&["RL.CONCURRENCY", "conc", "1001", "1000", "ACQUIRE", "a"], Has("ERR invalid N '1001'")),
    (&["RL.CONCURRENCY", "conc", "2", "0", "PEEK"], Is("ERR invalid TTL '0': expected an integer from 1 to 1000000000000")),
    (&["RL.CONCURRENCY", "conc", "2", HUGE, "PEEK"], Has("ERR invalid TTL '9999")),
    (&["RL.CONCURRENCY", "conc", "2", "-5", "ACQUIRE", "a"], Has("ERR invalid TTL '-5'")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "GRAB", "a"], Is("ERR unknown operation 'GRAB'; expected ACQUIRE, RENEW, RELEASE or PEEK")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "ACQUIRE"], Is("ERR ACQUIRE needs the holder's id")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "release"], Is("ERR RELEASE needs the holder's id")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "ACQUIRE", ""], Is("ERR invalid id of 0 bytes: expected 1 to 1024 bytes")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "RENEW", HUGE], Is("ERR invalid id of 5000 bytes: expected 1 to 1024 bytes")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "ACQUIRE", "a", "b"], Is("ERR too many arguments")),
    (&["RL.CONCURRENCY", "conc", "2", "1000", "PEEK", "a"], Is("ERR too many arguments")),
    (&["RL.CONCURRENCY", "gcra", "2", "1000", "ACQUIRE", "a"], Is("WRONGTYPE the key holds a GCRA limiter, not a concurrency limiter; use another key or DEL it")),
    (&["RL.CONCURRENCY", "str", "2", "1000", "PEEK"], Has("WRONGTYPE the key holds a string")),
    (&["RL.GCRA", "conc", "10", "1000"], Is("WRONGTYPE the key holds a concurrency limiter, not a GCRA limiter; use another key or DEL it")),
    (&["RL.CONCURRENCY", "conc", "2", "1000"], Has("wrong number of arguments")),
    // RL.THROTTLE: redis-cell's arguments; what redis-cell gets wrong is refused.
    (&["RL.THROTTLE", "gcra", "-1", "10", "1"], Is("ERR invalid max_burst '-1': expected an integer from 0 to 999999999999")),
    (&["RL.THROTTLE", "gcra", "1", "0", "1"], Is("ERR invalid count_per_period '0': expected an integer from 1 to 1000000000000")),
    (&["RL.THROTTLE", "gcra", "1", "10", "0"], Is("ERR invalid period '0': expected an integer from 1 to 1000000000")),
    (&["RL.THROTTLE", "gcra", "1", "10", "1.5"], Has("ERR invalid period '1.5'")),
    (&["RL.THROTTLE", "gcra", "1", "10", "1", "-1"], Is("ERR invalid quantity '-1': expected an integer from 0 to 1000000000000")),
    (&["RL.THROTTLE", "gcra", "999999", "1", "1000000000"], Has("takes longer than")),
    (&["RL.THROTTLE", "gcra", "1", "10", "1", "1", "1"], Has("wrong number of arguments")),
    (&["RL.THROTTLE", "gcra", "1", "10"], Has("wrong number of arguments")),
    (&["RL.THROTTLE", "str", "1", "10", "1"], Is("WRONGTYPE the key holds a string, not a GCRA limiter; use another key or DEL it")),
    (&["RL.THROTTLE", "shape", "1", "10", "1"], Has("WRONGTYPE the key holds a leaky bucket limiter")),
    (&["CL.THROTTLE", "gcra", "1", "10", "1"], Has("unknown command")),
    // RL.SETSTATE and RL.DEBUG
    (&["RL.SETSTATE", "gcra", "garbage"], Has("ERR invalid limiter state")),
    (&["RL.SETSTATE", "gcra", ""], Has("ERR invalid limiter state: truncated")),
    (&["RL.DEBUG", "CLOCK", "SET", "x"], Has("invalid ms 'x'")),
    (&["RL.DEBUG", "CLOCK", "JUMP"], Has("unknown CLOCK action 'JUMP'")),
    (&["RL.DEBUG", "NOPE", "x"], Has("unknown subcommand 'NOPE'")),
    (&["RL.DEBUG", "CLOCK"], Has("wrong number of arguments")),
    // RL.SHARE and RL.DEMAND (the budget controller's, docs/regions.md)
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "k"], Has("wrong number of arguments")),
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "k", "1", "9000000000000", "k2"], Has("wrong number of arguments")),
    (&["RL.SHARE", "NOPE", "10", "1000", "10", "k", "1", "9000000000000"], Has("unknown algorithm 'NOPE'")),
    (&["RL.SHARE", "GCRA", "0", "1000", "10", "k", "1", "9000000000000"], Has("invalid L '0'")),
    (&["RL.SHARE", "FIXEDWINDOW", "10", "1000", "11", "k", "1", "9000000000000"], Has("B must equal L")),
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "k", "1", "0"], Has("needs an expiry")),
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "k", "-1", "9000000000000"], Has("invalid share")),
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "str", "1", "9000000000000"], Has("WRONGTYPE the key holds a string")),
    (&["RL.SHARE", "GCRA", "10", "1000", "10", "k", "1", "1"], Has("share expiry 1 has passed")),
    (&["RL.DEMAND"], Has("wrong number of arguments")),
    (&["RL.DEMAND", "str"], Has("WRONGTYPE the key holds a string")),
    // RL.PEEK and RL.INSPECT: one key, read only.
    (&["RL.PEEK"], Has("wrong number of arguments")),
    (&["RL.PEEK", "gcra", "extra"], Has("wrong number of arguments")),
    (&["RL.PEEK", "str"], Is("WRONGTYPE the key holds a string, not a limiter; use another key or DEL it")),
    (&["RL.PEEK", "list"], Has("WRONGTYPE the key holds a list")),
    (&["RL.INSPECT"], Has("wrong number of arguments")),
    (&["RL.INSPECT", "gcra", "extra"], Has("wrong number of arguments")),
    (&["RL.INSPECT", "str"], Is("WRONGTYPE the key holds a string, not a limiter; use another key or DEL it")),
    (&["RL.INSPECT", "list"], Has("WRONGTYPE the key holds a list")),
];

#[test]
fn every_argument_error_is_clear_and_changes_nothing() {
    let (mut s, mut c) = server();
    for words in SETUP {
        cmd(&mut c, words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
    }
    let before = snapshot(&mut c);
    let huge = "9".repeat(5000);
    for (words, text) in CASES {
        let words: Vec<&str> = words
            .iter()
            .map(|w| if *w == HUGE { huge.as_str() } else { w })
            .collect();
        let e = err(&mut c, &words);
        match text {
            Is(expected) => assert_eq!(e, *expected, "{words:?}"),
            Has(expected) => assert!(
                e.contains(expected),
                "{words:?}: got {e:?}, expected {expected:?}"
            ),
        }
        assert_eq!(snapshot(&mut c), before, "{words:?} changed a key");
    }
    // Nothing created, nothing lost; the other types are untouched and the server lives on.
    assert_eq!(
        cmd(&mut c, &["DBSIZE"]).unwrap(),
        Value::Int(SETUP.len() as i64)
    );
    assert_eq!(
        cmd(&mut c, &["GET", "str"]).unwrap(),
        Value::BulkString(b"x".to_vec())
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.TOKENBUCKET", "refund", "10", "1000", "COST", "0"]
        )[2],
        9
    );
    assert_eq!(
        cmd(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert!(s.alive());
}

/// Every command the module registers has rows: a new command cannot skip the table.
#[test]
fn the_table_covers_every_command() {
    let (_s, mut c) = server();
    let commands: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("PATTERN")
        .arg("rl.*")
        .query(&mut c)
        .unwrap();
    assert!(commands.len() >= 9, "{commands:?}");
    for command in commands {
        assert!(
            CASES
                .iter()
                .any(|(words, _)| words[0].eq_ignore_ascii_case(&command)),
            "no argument error for {command}"
        );
    }
}
