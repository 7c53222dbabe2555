//! The algorithms the module registers (`algo::registry!` in src/algo/mod.rs), as a running
//! server reports them. The integration tests cannot link the module (its allocator is Redis's),
//! so they learn the registry from a server started for the purpose, once per test binary:
//! `INFO ratelimit` has one `<id>_keys` gauge per algorithm; its command is `RL.` and the id
//! without underscores (checked against `COMMAND LIST FILTERBY MODULE ratelimit` and against the
//! algorithm `RL.INSPECT` names on a key it created); probes tell whether it takes `BURST` and
//! whether `RL.ALL` offers it.
//!
//! A suite that covers every algorithm iterates [`algorithms`] (or [`limiter_algorithms`]), or
//! keeps its own table of algorithm-specific rows and checks it with [`assert_covers`]: a new
//! algorithm then fails the suite, named, until the table has its row.

use std::sync::OnceLock;

use super::{clock_set, cmd, Connection, Server, Value, T0_MS};

/// One algorithm of the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Algorithm {
    /// How `INFO ratelimit` and `RL.INSPECT` name it: "fixed_window".
    pub id: String,
    /// Its command: "RL.FIXEDWINDOW".
    pub command: String,
    /// Its name inside `RL.ALL`: the command without `RL.`.
    pub word: String,
    /// It takes the `BURST` option (the bucket algorithms); else its capacity is L (the window
    /// algorithms) or its queue (`RL.SHAPE`).
    pub burst: bool,
    /// A limiter: the five-integer reply, and offered inside `RL.ALL`. Else a shaper (`RL.SHAPE`:
    /// a sixth field, the delay, and a `QUEUE`).
    pub limiter: bool,
}

impl Algorithm {
    /// Whether `name` names it: its command, its word (any case) or its id.
    pub fn is_named(&self, name: &str) -> bool {
        [&self.command, &self.word, &self.id]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// Every algorithm of the registry, in the order `INFO ratelimit` lists them (the registry's).
pub fn algorithms() -> &'static [Algorithm] {
    &registered().1
}

/// The module's commands and its algorithms, read from one server started once per test binary.
fn registered() -> &'static (Vec<String>, Vec<Algorithm>) {
    static REGISTERED: OnceLock<(Vec<String>, Vec<Algorithm>)> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let s = Server::start();
        let mut c = s.connect();
        clock_set(&mut c, T0_MS);
        let commands = module_commands_on(&mut c);
        let algorithms = ids(&mut c)
            .into_iter()
            .map(|id| probe(&mut c, &commands, id))
            .collect();
        (commands, algorithms)
    })
}

/// The limiters of the registry: the algorithms `RL.ALL` offers, with the five-integer reply.
pub fn limiter_algorithms() -> impl Iterator<Item = &'static Algorithm> {
    algorithms().iter().filter(|a| a.limiter)
}

/// The algorithm `name` names (see [`Algorithm::is_named`]); panics if none.
pub fn algorithm(name: &str) -> &'static Algorithm {
    algorithms()
        .iter()
        .find(|a| a.is_named(name))
        .unwrap_or_else(|| panic!("no algorithm of the registry is named {name:?}"))
}

/// Every command the module registers, upper case, sorted.
pub fn module_commands() -> &'static [String] {
    &registered().0
}

/// Panics, naming them, when some algorithm of `of` has no entry in `covered`: the entries of
/// the test table `table` that name an algorithm (its command "RL.GCRA", its word "GCRA" or its
/// id "gcra"; other entries are ignored).
pub fn assert_covers<'a, S: AsRef<str>>(
    table: &str,
    of: impl IntoIterator<Item = &'a Algorithm>,
    covered: impl IntoIterator<Item = S>,
) {
    let covered: Vec<S> = covered.into_iter().collect();
    let missing: Vec<String> = of
        .into_iter()
        .filter(|a| !covered.iter().any(|name| a.is_named(name.as_ref())))
        .map(|a| format!("{} ({})", a.id, a.command))
        .collect();
    assert!(
        missing.is_empty(),
        "{table} has no row for {}: every algorithm of the registry (algo::registry! in \
         src/algo/mod.rs) needs one (docs/development.md, Adding an algorithm)",
        missing.join(", ")
    );
}

fn module_commands_on(c: &mut Connection) -> Vec<String> {
    let names: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("ratelimit")
        .query(c)
        .unwrap();
    let mut names: Vec<String> = names.iter().map(|n| n.to_ascii_uppercase()).collect();
    names.sort();
    names
}

/// The algorithm ids `INFO ratelimit` has a `<id>_keys` gauge for, in its order.
fn ids(c: &mut Connection) -> Vec<String> {
    let info: String = redis::cmd("INFO").arg("ratelimit").query(c).unwrap();
    let ids: Vec<String> = info
        .lines()
        .filter_map(|l| l.strip_prefix("ratelimit_")?.split_once(':'))
        .filter_map(|(field, _)| field.strip_suffix("_keys"))
        .map(str::to_string)
        .collect();
    assert!(
        !ids.is_empty(),
        "no <id>_keys gauge in INFO ratelimit:\n{info}"
    );
    ids
}

/// What the server says of the algorithm `id`.
fn probe(c: &mut Connection, commands: &[String], id: String) -> Algorithm {
    let word = id.replace('_', "").to_ascii_uppercase();
    let command = format!("RL.{word}");
    assert!(
        commands.contains(&command),
        "INFO ratelimit has the gauge {id}_keys but the module registers no {command} \
         (COMMAND LIST FILTERBY MODULE ratelimit: {commands:?}); the tests expect an \
         algorithm's command to be its INFO id without underscores"
    );
    let key = format!("registry:{id}");
    cmd(c, &[command.as_str(), &key, "10", "1000"])
        .unwrap_or_else(|e| panic!("{command} {key} 10 1000: {e}"));
    let inspected = inspected_algorithm(c, &key);
    assert_eq!(
        inspected, id,
        "{command} stored a limiter RL.INSPECT names {inspected:?}, not {id:?}"
    );
    let accepts = |c: &mut Connection, words: &[&str]| cmd(c, words).is_ok();
    let burst = accepts(
        c,
        &[
            command.as_str(),
            "registry:burst",
            "10",
            "1000",
            "BURST",
            "10",
            "COST",
            "0",
        ],
    );
    let limiter = accepts(
        c,
        &[
            "RL.ALL",
            "1",
            "registry:all",
            &word,
            "10",
            "1000",
            "COST",
            "0",
        ],
    );
    Algorithm {
        id,
        command,
        word,
        burst,
        limiter,
    }
}

/// The `algorithm` field of `RL.INSPECT key`.
fn inspected_algorithm(c: &mut Connection, key: &str) -> String {
    let fields: Vec<Value> = redis::cmd("RL.INSPECT").arg(key).query(c).unwrap();
    fields
        .chunks(2)
        .find_map(|pair| match pair {
            [Value::BulkString(name), Value::BulkString(value)] if name == b"algorithm" => {
                Some(String::from_utf8_lossy(value).into_owned())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("RL.INSPECT {key} has no algorithm field: {fields:?}"))
}
