//! The algorithms the module registers: the core crate's registry (`algo::registry!` in
//! core/src/algo/mod.rs, listed as `ratelimit_core::algo::listed::REGISTRY`), which the tests link; no
//! server is needed to know them. The module's commands are read once per test binary from a
//! server started for the purpose, which also checks that `INFO ratelimit` has a gauge for every
//! algorithm of the registry and no other.
//!
//! A suite that covers every algorithm iterates [`algorithms`] (or [`limiter_algorithms`]), or
//! keeps its own table of algorithm-specific rows and checks it with [`assert_covers`]: a new
//! algorithm then fails the suite, named, until the table has its row.

use std::sync::OnceLock;

use redis::Connection;

use super::server::Server;

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
    /// a sixth field, the delay, and a `QUEUE`) or the concurrency limiter (`RL.CONCURRENCY`:
    /// `key N TTL` and an operation).
    pub limiter: bool,
    /// Its kind in the registry: "limiter", "shaper" or "concurrency".
    pub kind: String,
}

impl Algorithm {
    /// What its own command takes after `key L W`: `RL.CONCURRENCY`'s `key N TTL` needs an
    /// operation (an ACQUIRE by one id); the others nothing.
    pub fn operation(&self) -> &'static [&'static str] {
        if self.kind == "concurrency" {
            &["ACQUIRE", "id"]
        } else {
            &[]
        }
    }

    /// Whether `name` names it: its command, its word (any case) or its id.
    pub fn is_named(&self, name: &str) -> bool {
        [&self.command, &self.word, &self.id]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// Every algorithm of the registry, in its order (also `INFO ratelimit`'s).
pub fn algorithms() -> &'static [Algorithm] {
    static ALGORITHMS: OnceLock<Vec<Algorithm>> = OnceLock::new();
    ALGORITHMS.get_or_init(|| {
        ratelimit_core::algo::listed::REGISTRY
            .iter()
            .map(|l| Algorithm {
                id: l.id.to_string(),
                command: format!("RL.{}", l.word),
                word: l.word.to_string(),
                // A shaper's capacity is not L either, but it is set by QUEUE, not BURST.
                burst: l.burst && l.limiter,
                limiter: l.limiter,
                kind: l.kind.to_string(),
            })
            .collect()
    })
}

/// The module's commands, read from one server started once per test binary; it checks there
/// that `INFO ratelimit` shows exactly the registry's algorithms.
fn registered() -> &'static Vec<String> {
    static REGISTERED: OnceLock<Vec<String>> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let s = Server::start();
        let mut c = s.connect();
        let registry: Vec<&str> = algorithms().iter().map(|a| a.id.as_str()).collect();
        assert_eq!(
            ids(&mut c),
            registry,
            "INFO ratelimit's <id>_keys gauges differ from the registry"
        );
        module_commands_on(&mut c)
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
    registered()
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
         core/src/algo/mod.rs) needs one (docs/development.md, Adding an algorithm)",
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
