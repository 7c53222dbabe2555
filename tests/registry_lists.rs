//! The lists of algorithms outside Rust against the registry (the core's `algo::listed`): the
//! benchmark's rows (`scripts/benchkit/throughput.py`, derived from the registry, asked here
//! with the registry handed to it) and the Functions library's `LIST` (`functions/ratelimit.lua`,
//! one source file, read here as text). Each test fails naming the file that disagrees. No
//! server; the RLS's and the regions controller's words have their own tests
//! (`rls/tests/registry.rs`, `regions/tests/registry.rs`), the client's `client/tests/registry.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ratelimit_core::algo::listed::{self, REGISTRY};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_benchmarks_rows_are_the_registrys_limiters() {
    let out = Command::new("python3")
        .current_dir(root().join("scripts"))
        .env("RL_REGISTRY", listed::tsv())
        .args([
            "-c",
            "from benchkit.throughput import table_rows\n\
             for r in table_rows(): print(r['label'] + '\\t' + r['cmd'])",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "scripts/benchkit/throughput.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(label, cmd)| (label.to_string(), cmd.to_string()))
        .collect();
    for l in listed::limiters() {
        let command = format!("RL.{}", l.word);
        let function = format!("rl_{}", l.word.to_ascii_lowercase());
        for (label, starts) in [
            (command.clone(), format!("{command} {{key}} ")),
            (
                format!("{function} (library)"),
                format!("FCALL {function} 1 "),
            ),
        ] {
            let cmd = rows.get(&label).unwrap_or_else(|| {
                panic!(
                    "scripts/benchkit/throughput.py has no row '{label}' for the registry's {}",
                    l.word
                )
            });
            assert!(
                cmd.starts_with(&starts),
                "scripts/benchkit/throughput.py: row '{label}' runs '{cmd}'"
            );
        }
    }
}

/// One algorithm's table of the library (`local gcra = { tag = 'g', word = 'GCRA', … }`): its
/// fields as written.
fn lua_fields(line: &str) -> BTreeMap<String, String> {
    let inner = line
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map_or("", |(inner, _)| inner);
    inner
        .split(',')
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_string(),
                v.trim().trim_matches('\'').to_string(),
            )
        })
        .collect()
}

#[test]
fn the_librarys_algorithms_are_the_registrys() {
    let lua = std::fs::read_to_string(root().join("functions/ratelimit.lua")).expect("the library");
    let tables: BTreeMap<&str, BTreeMap<String, String>> = lua
        .lines()
        .filter(|l| l.starts_with("local ") && l.contains("= { tag = "))
        .filter_map(|l| {
            let name = l.strip_prefix("local ")?.split_whitespace().next()?;
            Some((name, lua_fields(l)))
        })
        .collect();
    let list = lua
        .lines()
        .find_map(|l| l.strip_prefix("local LIST = {"))
        .expect("functions/ratelimit.lua has its one `local LIST = { … }`");
    let listed: Vec<&str> = list
        .trim_end_matches('}')
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let field = |t: &BTreeMap<String, String>, k: &str| t.get(k).cloned().unwrap_or_default();
    let library: Vec<(String, String, String, bool, bool)> = listed
        .iter()
        .map(|name| {
            let t = tables.get(name).unwrap_or_else(|| {
                panic!("functions/ratelimit.lua: LIST names '{name}', which has no `local {name} = {{ tag = … }}` line")
            });
            (
                field(t, "word"),
                field(t, "fname"),
                field(t, "name"),
                field(t, "burst") == "true",
                field(t, "shaper") != "true",
            )
        })
        .collect();
    // The concurrency kind keeps holders, not a rate state: the library gives it an entry of
    // its own, outside LIST, registered under the registry's word.
    for l in REGISTRY.iter().filter(|l| l.kind == "concurrency") {
        let fname = format!("rl_{}", l.word.to_ascii_lowercase());
        assert!(
            lua.contains(&format!("redis.register_function('{fname}'")),
            "functions/ratelimit.lua registers no '{fname}' for the registry's {}",
            l.word
        );
    }
    let registry: Vec<(String, String, String, bool, bool)> = REGISTRY
        .iter()
        .filter(|l| l.kind != "concurrency")
        .map(|l| {
            (
                l.word.to_string(),
                format!("rl_{}", l.word.to_ascii_lowercase()),
                l.name.to_string(),
                l.burst,
                l.limiter,
            )
        })
        .collect();
    assert_eq!(
        library, registry,
        "functions/ratelimit.lua's LIST (word, fname, name, burst, a limiter) differs from the \
         registry's algorithms in its order (docs/development.md, Adding an algorithm)"
    );
}

/// The minimal ACL rule for the module backend (docs/operating.md, held word for word to
/// `testkit::MODULE_COMMANDS` by `client/tests/connections.rs`) lets a gateway call every
/// algorithm's own command: without `+rl.<word>` a gateway set up by the docs is refused NOPERM.
#[test]
fn the_minimal_acl_rule_names_every_algorithms_command() {
    let granted: Vec<&str> = testkit::MODULE_COMMANDS.split_whitespace().collect();
    for l in REGISTRY {
        let wanted = format!("+rl.{}", l.word.to_lowercase());
        assert!(
            granted.contains(&wanted.as_str()),
            "testkit/src/rules.rs MODULE_COMMANDS (and docs/operating.md's rule) lacks {wanted}"
        );
    }
}
