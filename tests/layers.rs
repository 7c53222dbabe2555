//! The layers, checked from the source of the module (`src/`) and of the core crate
//! (`core/src/`, which the module re-exports as `algo`, `error` and `state`): no `crate::` path
//! runs from a lower layer to a higher one, and `unsafe` code stays in the C API boundary
//! (`src/host/`) and the data type's callbacks (`src/state/rdb.rs`). No server needed: it reads
//! the files.
//!
//! Bottom up: `algo` → `error`, `config` → `state` → `host` → `clock`, `metrics`, `server_facts` →
//! `command` → `lib.rs`. A module of the same layer may use another.
//!
//! And in every crate of the workspace, at file level: no two files name each other, directly
//! or round a circle (`no_files_import_each_other_in_a_circle`, which names each arrow).

use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its layer; `lib` is `src/lib.rs` itself.
const LAYERS: &[(&str, u8)] = &[
    ("algo", 0),
    ("error", 1),
    ("config", 1),
    ("state", 2),
    ("host", 3),
    ("clock", 4),
    ("metrics", 4),
    ("server_facts", 4),
    ("command", 5),
    ("lib", 6),
    // The core's `algo::registry!`, exported at the core's root as macros are.
    ("registry", 0),
];

/// Where `unsafe` may appear.
const UNSAFE_ALLOWED: &[&str] = &["src/host/", "src/state/rdb.rs"];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/command/all.rs` → "command", `src/lib.rs` →
/// "lib", `core/src/algo/gcra.rs` → "algo" (the core's `lib.rs` only declares its modules).
fn module_of(relative: &str) -> &str {
    let rest = relative
        .trim_start_matches("core/")
        .trim_start_matches("src/");
    let first = rest.split('/').next().unwrap_or(rest);
    first.trim_end_matches(".rs")
}

/// The code of a line, without a `//` comment (doc comments included).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or(line)
}

/// The modules a line names as `crate::NAME` (also `$crate::NAME` in macros). A name that is
/// not a module (an item of `lib.rs`) counts as `lib`.
fn crate_paths(line: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..end];
        names.push(if layer(name).is_some() { name } else { "lib" });
        rest = after;
    }
    names
}

#[test]
fn no_import_runs_up_a_layer_and_unsafe_stays_at_the_boundary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("core").join("src"), &mut files);
    files.sort();
    assert!(!files.is_empty());
    let mut problems = Vec::new();
    for path in &files {
        let relative = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .replace('\\', "/");
        let module = module_of(&relative);
        let Some(own) = layer(module) else {
            problems.push(format!(
                "{relative}: module `{module}` has no layer in tests/layers.rs"
            ));
            continue;
        };
        let text = fs::read_to_string(path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = code(line);
            for target in crate_paths(code) {
                let theirs = layer(target).unwrap_or(u8::MAX);
                if theirs > own {
                    problems.push(format!(
                        "{relative}:{}: `{module}` uses `{target}`, a higher layer",
                        n + 1
                    ));
                }
            }
            let allowed = UNSAFE_ALLOWED.iter().any(|a| relative.starts_with(a));
            let has_unsafe = code
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == "unsafe");
            if has_unsafe && !allowed {
                problems.push(format!(
                    "{relative}:{}: `unsafe` outside src/host/ and src/state/rdb.rs",
                    n + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_a_path_up() {
    assert_eq!(crate_paths("use crate::command::table;"), ["command"]);
    assert_eq!(crate_paths("x = crate::MAX_LOG_ENTRIES;"), ["lib"]);
    assert_eq!(
        crate_paths("impl $crate::algo::Algorithm"),
        ["algo"],
        "macros count too"
    );
    assert_eq!(code("let a = 1; // crate::command"), "let a = 1; ");
    assert_eq!(module_of("src/command/all.rs"), "command");
    assert_eq!(module_of("src/lib.rs"), "lib");
    assert_eq!(module_of("core/src/state/delta.rs"), "state");
}

mod sources;

/// No two files of one crate name each other, directly or round a circle: in every crate of
/// every package of the workspace (libraries, binaries, tests, examples), `super::` and
/// `crate::` paths, re-exports and macro bodies included (see `tests/sources/imports.rs`).
#[test]
fn no_files_import_each_other_in_a_circle() {
    let mut circles = std::collections::BTreeMap::new();
    let mut arrows = 0;
    for package in sources::packages() {
        for root in sources::crate_roots(&package) {
            let found = sources::imports::arrows(&root);
            arrows += found.len();
            for circle in sources::imports::circles(&found) {
                let mut files: Vec<String> = circle.iter().map(|a| a.from.clone()).collect();
                files.sort();
                let named: Vec<String> = circle
                    .iter()
                    .map(|a| format!("{}:{} -> {}", a.from, a.line, a.to))
                    .collect();
                circles.insert(files, named.join(", "));
            }
        }
    }
    assert!(arrows > 100, "the sources were read");
    println!("{arrows} arrows between files (counted per crate)");
    let problems: Vec<String> = circles.into_values().collect();
    assert!(
        problems.is_empty(),
        "import circles (file:line of the first name -> the file it names):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_resolves_paths_to_files() {
    let arrows = |root: &str| {
        let found = sources::imports::arrows(&sources::root().join(root));
        found
            .into_iter()
            .map(|a| format!("{} -> {}", a.from, a.to))
            .collect::<Vec<_>>()
    };
    let core = arrows("core/src/lib.rs");
    for arrow in [
        // `use super::policy::Policy`: a sibling's file.
        "core/src/algo/gcra.rs -> core/src/algo/policy.rs",
        // `use share::{Share, Shared}`: a child module's file.
        "core/src/state/mod.rs -> core/src/state/share.rs",
        // A macro body's `$crate::algo::policy::Policy`.
        "core/src/algo/algorithm.rs -> core/src/algo/policy.rs",
        // `use super::*` in a sibling tests.rs.
        "core/src/algo/step/tests.rs -> core/src/algo/step.rs",
    ] {
        assert!(core.iter().any(|a| a == arrow), "{arrow} not seen");
    }
    // A re-export is an arrow to the file that re-exports: `crate::algo::Policy` names mod.rs.
    assert!(core
        .iter()
        .any(|a| a == "core/src/state/mod.rs -> core/src/algo/mod.rs"));
    // `crate::algo` in the module is the core crate's, re-exported from outside the crate.
    assert!(!arrows("src/lib.rs")
        .iter()
        .any(|a| a.starts_with("src/clock.rs -> src/lib.rs")));
    let client = arrows("client/src/lib.rs");
    assert!(client
        .iter()
        .any(|a| a == "client/src/limiter.rs -> client/src/billing/ledger.rs"));
    // A test that is a directory (`tests/functions/main.rs`) is a crate of its own.
    assert!(sources::crate_roots("")
        .iter()
        .any(|r| sources::relative(r) == "tests/functions/main.rs"));
    assert!(arrows("tests/functions/main.rs")
        .iter()
        .any(|a| a == "tests/functions/traces.rs -> tests/functions/calls.rs"));
    let a = |from: &str, to: &str| sources::imports::Arrow {
        from: from.into(),
        to: to.into(),
        line: 1,
    };
    let circles = sources::imports::circles(&[a("x", "y"), a("y", "z"), a("z", "x"), a("z", "w")]);
    assert_eq!(circles.len(), 1);
    assert_eq!(circles[0], [a("x", "y"), a("y", "z"), a("z", "x")]);
}
