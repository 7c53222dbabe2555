//! The workspace's Rust sources as text, for the tests that check the house from its files
//! (`tests/layers.rs`, `tests/rooms.rs`): where the packages are, every `.rs` file, and the
//! code of a file as tokens, without comments, strings or character literals. No server.
#![allow(dead_code)]

pub mod imports;

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (the module's package is the root package).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every package of the workspace, as its directory relative to the root ("" for the root
/// package), read from `members` in the root `Cargo.toml`: a new member is checked at once.
pub fn packages() -> Vec<String> {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).expect("the root Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a workspace members line");
    let mut packages = vec![String::new()];
    packages.extend(
        line.split('"')
            .skip(1)
            .step_by(2)
            .map(|member| member.to_string()),
    );
    packages
}

/// `path` relative to the root, with `/` separators.
pub fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every `.rs` file under `dir`, sorted; `target` and hidden directories aside.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// One token of Rust code: an identifier or keyword, or one punctuation character (`::` is
/// its own token). Comments, strings, characters and numbers are dropped, so a brace in a
/// string never counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Word(String),
    Path,
    Punct(char),
}

/// The code of `text` as tokens, each with its line (1-based).
pub fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == 'r' && (at(i + 1) == '#' || at(i + 1) == '"') && raw_string(&chars, i) {
            // r"…" or r#"…"#: ends at the quote followed by as many hashes.
            let mut hashes = 0;
            i += 1;
            while at(i) == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                    i += 1 + hashes;
                    break;
                }
                line += usize::from(chars[i] == '\n');
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                line += usize::from(chars[i] == '\n');
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{7f}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Word(chars[start..i].iter().collect()), line));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push((Token::Path, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Whether the `r` at `i` opens a raw string (not an identifier that starts with r).
fn raw_string(chars: &[char], i: usize) -> bool {
    let before = i.checked_sub(1).and_then(|b| chars.get(b)).copied();
    if before.is_some_and(|b| b.is_alphanumeric() || b == '_') {
        return false;
    }
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
}

/// The crate roots of a package (its directory relative to the root, "" for the root
/// package): `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, each file of `tests/`, `examples/`
/// and `benches/`, and each `main.rs` one directory down in those (`tests/functions/main.rs`,
/// the test `functions`): every crate cargo builds from it.
pub fn crate_roots(package: &str) -> Vec<PathBuf> {
    let dir = root().join(package);
    let mut roots: Vec<PathBuf> = ["src/lib.rs", "src/main.rs"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.is_file())
        .collect();
    for sub in ["src/bin", "tests", "examples", "benches"] {
        if let Ok(entries) = fs::read_dir(dir.join(sub)) {
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter_map(|p| {
                    if p.is_dir() {
                        Some(p.join("main.rs")).filter(|m| m.is_file())
                    } else {
                        Some(p).filter(|p| p.extension().is_some_and(|e| e == "rs"))
                    }
                })
                .collect();
            files.sort();
            roots.extend(files);
        }
    }
    roots
}
