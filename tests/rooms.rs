//! Small rooms: no Rust source file of the workspace (every package, its `src/`, `examples/`,
//! `benches/`, and `scripts/`) holds more than [`MAX_LINES`] lines of code before its
//! `#[cfg(test)]` module, and a file whose inline tests take it past that moves them to a
//! sibling `tests.rs` (`mod tests;` beside it). Lines are counted as the file has them,
//! comments included: a reader scrolls through those too.
//!
//! Test-only files are the one exemption, by rule and not by name: a package's `tests/`
//! directory (integration tests and their harness) and a `tests.rs` (a module compiled only
//! for tests). The test prints those longer than the bound, so none is over it unseen.
//! No server needed: it reads the files.

mod sources;

use std::fs;

/// The bound, in lines.
const MAX_LINES: usize = 600;

/// Whether a file holds only tests (see the module comment).
fn test_only(relative: &str) -> bool {
    relative.starts_with("tests/")
        || relative.contains("/tests/")
        || relative.ends_with("/tests.rs")
}

/// The file's lines before its inline test module (`#[cfg(test)]`, maybe more attributes, then
/// `mod NAME {`), and its lines in all.
fn measure(text: &str) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let code = lines
        .iter()
        .enumerate()
        .position(|(n, line)| {
            line.trim() == "#[cfg(test)]"
                && lines[n + 1..]
                    .iter()
                    .map(|l| l.trim())
                    .find(|l| !l.starts_with("#["))
                    .is_some_and(|l| {
                        let l = l
                            .trim_start_matches("pub ")
                            .trim_start_matches("pub(crate) ");
                        l.starts_with("mod ") && l.ends_with('{')
                    })
        })
        .unwrap_or(lines.len());
    (code, lines.len())
}

#[test]
fn no_source_file_is_over_the_bound() {
    let files = sources::rust_files(sources::root());
    assert!(files.len() > 100, "the sources were read");
    let (mut problems, mut exempt) = (Vec::new(), Vec::new());
    for path in &files {
        let relative = sources::relative(path);
        let text = fs::read_to_string(path).expect("readable source");
        let (code, all) = measure(&text);
        if test_only(&relative) {
            if all > MAX_LINES {
                exempt.push(format!("{relative}: {all} lines (test-only)"));
            }
        } else if code > MAX_LINES {
            problems.push(format!(
                "{relative}: {code} lines of code before its tests, over {MAX_LINES}: split it by concept"
            ));
        } else if all > MAX_LINES {
            problems.push(format!(
                "{relative}: {all} lines with its inline tests, over {MAX_LINES}: move them to a sibling tests.rs"
            ));
        }
    }
    if !exempt.is_empty() {
        println!(
            "test-only files over {MAX_LINES} lines:\n{}",
            exempt.join("\n")
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_measure_stops_at_the_test_module() {
    let text = "use a;\n#[cfg(test)]\nmod adversarial;\nfn f() {}\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n}\n";
    assert_eq!(measure(text), (4, 8));
    assert_eq!(measure("fn f() {}\n"), (1, 1));
    assert!(test_only("tests/all.rs") && test_only("client/tests/support/mod.rs"));
    assert!(test_only("core/src/algo/step/tests.rs"));
    assert!(!test_only("core/src/algo/step.rs") && !test_only("src/testing.rs"));
}
