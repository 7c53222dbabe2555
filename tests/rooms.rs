//! Small rooms: no Rust source file of the workspace (every package, its `src/`, `tests/`,
//! `examples/`, `benches/`, and `scripts/`; the test harnesses and `tests.rs` files included)
//! holds more than [`MAX_LINES`] lines. A file whose code before its `#[cfg(test)]` module is
//! longer splits by concept; one whose inline tests take it past the bound moves them to a
//! sibling `tests.rs` (`mod tests;` beside it); a longer integration test becomes a directory
//! (`tests/functions/main.rs` and a file per concept beside it: the same test binary). Lines
//! are counted as the file has them, comments included: a reader scrolls through those too.
//! No server needed: it reads the files.

mod sources;

use std::fs;

/// The bound, in lines.
const MAX_LINES: usize = 600;

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
    let mut problems = Vec::new();
    for path in &files {
        let relative = sources::relative(path);
        let text = fs::read_to_string(path).expect("readable source");
        let (code, all) = measure(&text);
        if code == all && all > MAX_LINES {
            problems.push(format!(
                "{relative}: {all} lines, over {MAX_LINES}: split it by concept"
            ));
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
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_measure_stops_at_the_test_module() {
    let text = "use a;\n#[cfg(test)]\nmod adversarial;\nfn f() {}\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n}\n";
    assert_eq!(measure(text), (4, 8));
    assert_eq!(measure("fn f() {}\n"), (1, 1));
}
