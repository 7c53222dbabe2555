//! RL.THROTTLE (redis-cell's CL.THROTTLE) against a real server: redis-cell's own table of cases
//! on the debug clock, a differential test against RL.GCRA, the adoption of keys redis-cell
//! wrote, and CL.THROTTLE registered only under `CELL-COMPAT yes`.

mod support;
use support::*;

fn compat() -> (Server, Connection) {
    let s = Server::with(&[], &["CELL-COMPAT", "yes"]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    (s, c)
}

/// redis-cell's `it_rate_limits` cases (max_burst 4, 1 per second), through the command.
#[test]
fn redis_cell_table_of_cases() {
    let (_s, mut c) = server();
    let cases: [(u64, &str, [i64; 5]); 15] = [
        (0, "6", [1, 5, 5, -1, 0]),
        (0, "1", [0, 5, 4, -1, 1]),
        (0, "1", [0, 5, 3, -1, 2]),
        (0, "1", [0, 5, 2, -1, 3]),
        (0, "1", [0, 5, 1, -1, 4]),
        (0, "1", [0, 5, 0, -1, 5]),
        (0, "1", [1, 5, 0, 1, 5]),
        (3000, "1", [0, 5, 2, -1, 3]),
        (3100, "1", [0, 5, 1, -1, 4]),
        (4000, "1", [0, 5, 1, -1, 4]),
        (8000, "1", [0, 5, 4, -1, 1]),
        (9500, "1", [0, 5, 4, -1, 1]),
        (9500, "0", [0, 5, 4, -1, 1]),
        (9500, "2", [0, 5, 2, -1, 3]),
        (9500, "5", [1, 5, 2, 3, 3]),
    ];
    for (i, (at, q, want)) in cases.into_iter().enumerate() {
        clock_set(&mut c, T0_MS + at);
        assert_eq!(
            rl(&mut c, &["RL.THROTTLE", "k", "4", "1", "1", q]),
            want,
            "case {i}"
        );
    }
    // The default quantity is 1; the key is a GCRA limiter.
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "k2", "4", "1", "1"]),
        [0, 5, 4, -1, 1]
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "k2", "1", "1000", "BURST", "5", "COST", "0"]
        ),
        [1, 5, 4, -1, 1000]
    );
}

#[test]
fn edges_and_errors() {
    let (_s, mut c) = server();
    // quantity 0 on a missing key: not limited, creates nothing.
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "p", "0", "1", "10", "0"]),
        [0, 1, 1, -1, 0]
    );
    assert_eq!(dump(&mut c, "p"), None);
    // quantity above max_burst + 1: limited, retry -1 (never), nothing written.
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "p", "0", "1", "10", "2"]),
        [1, 1, 1, -1, 0]
    );
    assert_eq!(dump(&mut c, "p"), None);
    // max_burst 0: one at a time; a peek on a full key is still "not limited".
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "p", "0", "1", "10"]),
        [0, 1, 0, -1, 10]
    );
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "p", "0", "1", "10"]),
        [1, 1, 0, 10, 10]
    );
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "p", "0", "1", "10", "0"]),
        [0, 1, 0, -1, 10]
    );
    // Times round up to whole seconds: 3 per second leaves 333.33 ms.
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "r", "0", "3", "1"]),
        [0, 1, 0, -1, 1]
    );
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "r", "0", "3", "1"]),
        [1, 1, 0, 1, 1]
    );
    // A rate finer than 1 per ns (redis-cell: "Zero rates are not supported").
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "fast", "9", "1000000000000", "1"]),
        [0, 10, 9, -1, 1]
    );
    assert_errors_change_nothing(
        &mut c,
        [
            (
                vec!["RL.THROTTLE", "p", "-1", "1", "10"],
                "invalid max_burst",
            ),
            (
                vec!["RL.THROTTLE", "p", "0", "0", "10"],
                "invalid count_per_period",
            ),
            (vec!["RL.THROTTLE", "p", "0", "1", "0"], "invalid period"),
            (vec!["RL.THROTTLE", "p", "0", "1", "1.5"], "invalid period"),
            (
                vec!["RL.THROTTLE", "p", "0", "1", "10", "-1"],
                "invalid quantity",
            ),
            (
                vec!["RL.THROTTLE", "p", "0", "1", "10", "1", "x"],
                "wrong number",
            ),
        ],
    );
    assert!(err(&mut c, &["RL.THROTTLE", "p", "0", "1"]).contains("wrong number"));
    cmd(&mut c, &["SET", "s", "123"]).unwrap();
    // Without CELL-COMPAT, a string (even redis-cell's) is another type.
    assert_wrongtype(
        &mut c,
        &["RL.THROTTLE", "s", "0", "1", "10"],
        "a string",
        "GCRA",
    );
    let e = err(&mut c, &["CL.THROTTLE", "p", "0", "1", "10"]);
    assert!(e.contains("unknown command"), "{e}");
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn secs_up(ms: i64) -> i64 {
    (ms + 999) / 1000
}

/// `RL.THROTTLE k MB N P Q` answers exactly what `RL.GCRA k N P·1000 BURST MB+1 COST Q` answers
/// (a peek where Q is 0 or above MB+1), field for field after the unit change, and both keys
/// end byte-identical with the same expiry.
#[test]
fn differential_against_gcra() {
    let (_s, mut c) = server();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut calls = 0;
    for policy in 0..24 {
        let (mb, n, p) = (rng.below(8), 1 + rng.below(20), 1 + rng.below(4));
        let (mb_s, n_s, p_s, w_s, b_s) = (
            mb.to_string(),
            n.to_string(),
            p.to_string(),
            (p * 1000).to_string(),
            (mb + 1).to_string(),
        );
        let (tk, gk) = (format!("t{policy}"), format!("g{policy}"));
        for _ in 0..60 {
            let gap = match rng.below(3) {
                0 => 0,
                1 => rng.below(300),
                _ => rng.below(3000),
            };
            clock_advance(&mut c, gap as i64);
            let q = rng.below(mb + 3);
            let q_s = q.to_string();
            let spends = (1..=mb + 1).contains(&q);
            let cost = if spends { q_s.as_str() } else { "0" };
            let t = rl(&mut c, &["RL.THROTTLE", &tk, &mb_s, &n_s, &p_s, &q_s]);
            let g = rl(
                &mut c,
                &["RL.GCRA", &gk, &n_s, &w_s, "BURST", &b_s, "COST", cost],
            );
            let limited = if spends { 1 - g[0] } else { i64::from(q > 0) };
            let retry = if spends && g[3] >= 0 {
                secs_up(g[3])
            } else {
                -1
            };
            let want = [limited, g[1], g[2], retry, secs_up(g[4])];
            assert_eq!(t, want, "MB {mb} N {n} P {p} Q {q} (gcra {g:?})");
            assert_eq!(dump(&mut c, &tk), dump(&mut c, &gk));
            assert_eq!(pexpiretime(&mut c, &tk), pexpiretime(&mut c, &gk));
            calls += 1;
        }
    }
    assert_eq!(calls, 24 * 60);
}

#[test]
fn cl_throttle_only_with_cell_compat() {
    let (_s, mut c) = server();
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("CL.THROTTLE")
        .query(&mut c)
        .unwrap();
    assert_eq!(info, vec![Value::Nil]);
    let (_s2, mut c2) = compat();
    assert_eq!(
        rl(&mut c2, &["CL.THROTTLE", "k", "4", "1", "1"]),
        [0, 5, 4, -1, 1]
    );
    assert_eq!(
        rl(&mut c2, &["RL.THROTTLE", "k", "4", "1", "1"]),
        [0, 5, 3, -1, 2]
    );
    let flags: Vec<Value> = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("CL.THROTTLE")
        .arg("k")
        .arg("4")
        .arg("1")
        .arg("1")
        .query(&mut c2)
        .unwrap();
    assert_eq!(flags.len(), 1);
}

/// A key as redis-cell leaves it: the theoretical arrival time in ns since the epoch, as a
/// decimal string, expiring when the limiter is full again (`SET key tat PX ttl`).
fn cell_key(c: &mut Connection, key: &str, debt_ms: u64) {
    let tat_ns = (T0_MS + debt_ms) * 1_000_000;
    cmd(
        c,
        &[
            "SET",
            key,
            &tat_ns.to_string(),
            "PX",
            &debt_ms.max(1).to_string(),
        ],
    )
    .unwrap();
}

#[test]
fn adopts_redis_cell_keys_keeping_what_was_spent() {
    let (_s, mut c) = compat();
    // 3 of 5 spent (3 s of debt at 1 per second).
    cell_key(&mut c, "k", 3000);
    // A peek reads it and changes nothing.
    assert_eq!(
        rl(&mut c, &["CL.THROTTLE", "k", "4", "1", "1", "0"]),
        [0, 5, 2, -1, 3]
    );
    assert_eq!(
        cmd(&mut c, &["TYPE", "k"]).unwrap(),
        Value::SimpleString("string".into())
    );
    // The first call converts it: 4 spent now.
    assert_eq!(
        rl(&mut c, &["CL.THROTTLE", "k", "4", "1", "1"]),
        [0, 5, 1, -1, 4]
    );
    assert_eq!(
        cmd(&mut c, &["TYPE", "k"]).unwrap(),
        Value::SimpleString("ratelimit".into())
    );
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 4000) as i64);
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "k", "1", "1000", "BURST", "5", "COST", "0"]
        ),
        [1, 5, 1, -1, 4000]
    );
    // A full redis-cell key: the call is denied, but the key is converted all the same.
    cell_key(&mut c, "full", 5000);
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "full", "4", "1", "1"]),
        [1, 5, 0, 1, 5]
    );
    assert_eq!(
        cmd(&mut c, &["TYPE", "full"]).unwrap(),
        Value::SimpleString("ratelimit".into())
    );
    // Any other string is WRONGTYPE, as are other types.
    cmd(&mut c, &["SET", "junk", "12abc"]).unwrap();
    assert_wrongtype(
        &mut c,
        &["CL.THROTTLE", "junk", "4", "1", "1"],
        "a string",
        "GCRA",
    );
    cmd(&mut c, &["LPUSH", "list", "1"]).unwrap();
    assert_wrongtype(
        &mut c,
        &["CL.THROTTLE", "list", "4", "1", "1"],
        "a list",
        "GCRA",
    );
    // Other commands do not adopt: a GCRA command on a redis-cell string is WRONGTYPE.
    cell_key(&mut c, "other", 1000);
    assert_wrongtype(
        &mut c,
        &["RL.GCRA", "other", "1", "1000"],
        "a string",
        "GCRA",
    );
}

#[test]
fn adoption_reaches_the_replica_as_an_effect() {
    let master = Server::with(&[], &["CELL-COMPAT", "yes"]);
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3 * 3_600_000);
    replicate(&mut r, &master);
    cell_key(&mut m, "a", 2000);
    cell_key(&mut m, "b", 5000);
    rl(&mut m, &["CL.THROTTLE", "a", "4", "1", "1"]);
    rl(&mut m, &["CL.THROTTLE", "b", "4", "1", "1"]);
    wait_replica(&mut m);
    for key in ["a", "b"] {
        assert_eq!(
            cmd(&mut r, &["TYPE", key]).unwrap(),
            Value::SimpleString("ratelimit".into())
        );
        assert_eq!(dump(&mut m, key), dump(&mut r, key));
        assert_eq!(pexpiretime(&mut m, key), pexpiretime(&mut r, key));
    }
}

#[test]
fn cell_compat_takes_yes_or_no() {
    let e = match Server::on_port(free_port(), &[], &["CELL-COMPAT", "maybe"]) {
        Err(e) => e,
        Ok(_) => panic!("the load should fail"),
    };
    assert!(e.contains("CELL-COMPAT takes yes or no"), "{e}");
    // `no` is the default: no CL.THROTTLE.
    let s = Server::with(&[], &["CELL-COMPAT", "no"]);
    let mut c = s.connect();
    let e = err(&mut c, &["CL.THROTTLE", "k", "4", "1", "1"]);
    assert!(e.contains("unknown command"), "{e}");
}

/// A stand-in for redis-cell: a module of its own that owns `CL.THROTTLE` (answering `+OTHER`),
/// written against the module ABI directly (the first word of a module context is the API
/// lookup function), so the test needs only a C compiler.
const CL_THROTTLE_OWNER: &str = r#"
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef int (*GetApi)(const char *, void *);
typedef int (*CmdFunc)(RedisModuleCtx *, RedisModuleString **, int);
static int (*SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*CreateCommand)(RedisModuleCtx *, const char *, CmdFunc, const char *, int, int, int);
static int (*ReplyWithSimpleString)(RedisModuleCtx *, const char *);
static int other(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    return ReplyWithSimpleString(ctx, "OTHER");
}
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv; (void)argc;
    GetApi get = (GetApi)((void **)ctx)[0];
    if (get("RedisModule_SetModuleAttribs", &SetModuleAttribs) ||
        get("RedisModule_CreateCommand", &CreateCommand) ||
        get("RedisModule_ReplyWithSimpleString", &ReplyWithSimpleString))
        return 1;
    SetModuleAttribs(ctx, "clowner", 1, 1);
    return CreateCommand(ctx, "cl.throttle", other, "fast", 0, 0, 0);
}
"#;

/// Compiles `CL_THROTTLE_OWNER` into `dir` with the system's C compiler (`scripts/install-deps`
/// installs gcc for the server matrix).
fn cl_throttle_owner(dir: &std::path::Path) -> String {
    let source = dir.join("clowner.c");
    let module = dir.join("clowner.so");
    std::fs::write(&source, CL_THROTTLE_OWNER).unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&module)
        .arg(&source)
        .status()
        .expect("cc (apt-get install gcc; scripts/install-deps does)");
    assert!(status.success(), "cc failed to build the stand-in module");
    module.display().to_string()
}

/// With another module owning `CL.THROTTLE`, loading this one with `CELL-COMPAT yes` fails and
/// the log says why; without compat mode the two load side by side, each answering its own.
#[test]
fn cell_compat_refuses_a_cl_throttle_another_module_owns() {
    let dir = Scratch::new("test").unwrap();
    let owner = cl_throttle_owner(dir.path());
    let extra = ["--loadmodule", owner.as_str()];
    let e = match Server::on_port(free_port(), &extra, &["CELL-COMPAT", "yes"]) {
        Err(e) => e,
        Ok(_) => panic!("the load should fail: CL.THROTTLE belongs to another module"),
    };
    assert!(
        e.contains("CELL-COMPAT yes needs the name CL.THROTTLE, and another module"),
        "{e}"
    );
    let s = Server::with(&extra, &[]);
    let mut c = s.connect();
    assert_eq!(
        cmd(&mut c, &["CL.THROTTLE", "k", "4", "1", "1"]).unwrap(),
        Value::SimpleString("OTHER".into())
    );
    assert_eq!(
        rl(&mut c, &["RL.THROTTLE", "k", "4", "1", "1"]),
        [0, 5, 4, -1, 1]
    );
}

/// What `redis-cli` prints for one pasted line.
fn pasted(port: u16, line: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--no-raw"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The `ACL SETUSER gateway …` lines of a document (console prompts stripped), in order.
fn acl_lines(doc: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("127.0.0.1:6379> ").unwrap_or(l))
        .filter(|l| l.starts_with("ACL SETUSER gateway"))
        .map(str::to_string)
        .collect()
}

/// The migration guide's `+cl.throttle` line, pasted after the README's gateway lines on a
/// server with `CELL-COMPAT yes`, lets the gateway call `CL.THROTTLE`; without compat the line
/// fails as the guide says.
#[test]
fn cl_throttle_acl_line_pastes_on_a_compat_server() {
    let (readme, guide) = (
        acl_lines("README.md"),
        acl_lines("docs/migrating-from-redis-cell.md"),
    );
    assert_eq!(guide, ["ACL SETUSER gateway +cl.throttle"]);
    assert!(readme.len() >= 2);
    let (s, _) = compat();
    for line in readme.iter().chain(&guide) {
        assert_eq!(pasted(s.port, line), "OK", "{line}");
    }
    let mut c = s.connect();
    let _: () = redis::cmd("AUTH")
        .arg("gateway")
        .arg("secret")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        rl(&mut c, &["CL.THROTTLE", "rl:cell", "4", "1", "1"])[..3],
        [0, 5, 4]
    );
    let plain = Server::start();
    assert!(
        pasted(plain.port, &guide[0]).contains("Unknown command"),
        "without CELL-COMPAT"
    );
}
