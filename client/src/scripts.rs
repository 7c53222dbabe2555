//! The scripts backend: where `FUNCTION` is refused (Redis 6.2, a managed plan, an ACL without
//! it), each function of the library is served as its own script through `EVALSHA`, generated
//! from the one library source the client carries, never a second copy (docs/functions.md,
//! backends). A server that does not hold a script yet (`NOSCRIPT`: a restart, a failover, a
//! new Cluster node) gets it with `EVAL`, which runs the call and caches the script there.
//!
//! The file's marks split it: the hot path (between `-- @scripts: hot` and `-- @scripts: end
//! hot`) and the definitions before `-- @scripts: general` that it needs (a walk over their
//! names) run on every call; the other definitions there and the rest of the file become the body
//! of one function, run only when a call goes past the hot path (or has none), its
//! `redis.register_function` collecting the library's functions in a table. A script keeps
//! nothing between calls, so what the hot path does not use is not built on every call. The
//! `#!lua` line is dropped: `EVAL` reads `#!lua` as its own shebang.
//! scripts/benchkit/lua.py generates them the same way for the bench.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::library::LIBRARY_SOURCE;

/// One function's script and its SHA1 (what `EVALSHA` names).
pub struct Script {
    pub sha: String,
    pub text: String,
}

/// The script serving the library function `entry` (`rl_gcra` …), or None when the source
/// lacks the marks.
pub fn generate(source: &str, entry: &str) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    if !lines.first()?.starts_with("#!lua") {
        return None;
    }
    let at = |mark: &str| lines.iter().position(|l| *l == mark);
    let (general, hot, end) = (
        at("-- @scripts: general")?,
        at("-- @scripts: hot")?,
        at("-- @scripts: end hot")?,
    );
    if !(general < hot && hot < end) {
        return None;
    }
    let mut rest = lines[general..hot].to_vec();
    rest.extend_from_slice(&lines[end + 1..]);
    let definitions = definitions(&lines[1..general]);
    // The definitions the hot path names, and theirs, until none is added.
    let mut used = code(&lines[hot..=end]);
    let mut needed = vec![false; definitions.len()];
    let mut grown = true;
    while grown {
        grown = false;
        for ((names, text), needed) in definitions.iter().zip(needed.iter_mut()) {
            if !*needed && names.iter().any(|n| names_word(&used, n)) {
                *needed = true;
                grown = true;
                used.push_str(&code(text));
            }
        }
    }
    let mut out = vec![
        "local registered_entries = {}",
        "local function register_entry(name, callback)",
        "  if type(name) == 'table' then name, callback = name.function_name, name.callback end",
        "  registered_entries[name] = callback",
        "end",
    ];
    let pick = |want: bool| {
        definitions
            .iter()
            .zip(&needed)
            .filter(move |(_, n)| **n == want)
            .flat_map(|((_, text), _)| text.iter().copied())
    };
    out.extend(pick(true));
    out.extend_from_slice(&lines[hot..=end]);
    out.push("local function general_entry(keys, args, now)");
    out.extend(pick(false));
    // The hot path has run when the general entry does: the registration takes the body.
    out.push("local fast = function(_, body) return body end");
    let rest = rest
        .join("\n")
        .replace("redis.register_function", "register_entry");
    let tail = format!(
        "return registered_entries['{entry}'](keys, args, now)\nend\n\
         if HOT['{entry}'] then return fast(HOT['{entry}'], general_entry)(KEYS, ARGV) end\n\
         return general_entry(KEYS, ARGV)\n"
    );
    Some(format!("{}\n{rest}\n{tail}", out.join("\n")))
}

/// The top-level `local` definitions of `lines` (comments dropped): each one's names and lines.
fn definitions<'a>(lines: &[&'a str]) -> Vec<(Vec<&'a str>, Vec<&'a str>)> {
    let mut found: Vec<(Vec<&str>, Vec<&str>)> = Vec::new();
    let (mut open, mut comment) = (false, false);
    for line in lines {
        if comment {
            comment = !line.contains("]]");
        } else if let Some(head) = line.strip_prefix("local ") {
            let head = head.strip_prefix("function ").unwrap_or(head);
            let head = head.split(['=', '(']).next().unwrap_or("");
            let names = head
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|n| !n.is_empty())
                .collect();
            found.push((names, vec![*line]));
            open = true;
        } else if line.starts_with("--") {
            comment = line.starts_with("--[[") && !line.contains("]]");
            open = false;
        } else if let Some((_, text)) = found.last_mut().filter(|_| open) {
            text.push(line);
        }
    }
    found
}

/// The code of `lines` without their comments (a word in one is no use), one line each.
fn code(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| format!("\n{}", l.split("--").next().unwrap_or("")))
        .collect()
}

/// Whether `text` names `name` as a whole word.
fn names_word(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name)
        .any(|(at, _)| !text[..at].ends_with(word) && !text[at + name.len()..].starts_with(word))
}

/// Every entry's script, generated from the carried library once per process.
fn all() -> &'static HashMap<&'static str, Script> {
    static ALL: OnceLock<HashMap<&'static str, Script>> = OnceLock::new();
    ALL.get_or_init(|| {
        ENTRIES
            .iter()
            .filter_map(|entry| {
                let text = generate(LIBRARY_SOURCE, entry)?;
                let sha = redis::Script::new(&text).get_hash().to_string();
                Some((*entry, Script { sha, text }))
            })
            .collect()
    })
}

/// The script of `entry` (`rl_gcra` …): None for a name that is not a library function.
pub fn script(entry: &str) -> Option<&'static Script> {
    all().get(entry)
}

/// The script whose SHA1 is `sha`.
pub fn by_sha(sha: &str) -> Option<&'static Script> {
    all().values().find(|s| s.sha == sha)
}

/// Every function a client calls.
pub const ENTRIES: [&str; 16] = [
    "rl_gcra",
    "rl_tokenbucket",
    "rl_slidinglog",
    "rl_slidingcounter",
    "rl_fixedwindow",
    "rl_shape",
    "rl_lease",
    "rl_refund",
    "rl_charge",
    "rl_peek",
    "rl_all",
    "rl_settle",
    "rl_version",
    "rl_concurrency",
    "rl_share",
    "rl_demand",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_script() {
        for e in ENTRIES {
            let s = script(e).expect(e);
            assert_eq!(s.sha.len(), 40);
            assert!(s.text.contains(&format!("registered_entries['{e}']")));
            assert!(!s.text.contains("redis.register_function"));
            assert!(!s.text.starts_with("#!lua"));
            assert_eq!(by_sha(&s.sha).map(|x| x.sha.as_str()), Some(s.sha.as_str()));
        }
        assert!(generate("no marks", "rl_gcra").is_none());
    }

    /// The bench's scripts (scripts/benchkit/lua.py) are the client's, text for text.
    #[test]
    fn the_bench_generates_the_same_scripts() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
        for e in ["rl_gcra", "rl_tokenbucket", "rl_peek"] {
            let out = std::process::Command::new("python3")
                .current_dir(dir)
                .args(["-B", "-c"])
                .arg(format!(
                    "import sys\nfrom benchkit.lua import LIBRARY, library_script\n\
                     sys.stdout.write(library_script(open(LIBRARY).read(), '{e}'))"
                ))
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                script(e).unwrap().text,
                "{e}"
            );
        }
        // The hot path builds only what it uses: no error texts or argument parsing per call.
        let gcra = &script("rl_gcra").unwrap().text;
        let (hot, _) = gcra.split_once("local function general_entry").unwrap();
        assert!(hot.contains("local function idiv(") && !hot.contains("local function parse_int("));
        assert!(gcra.contains("local function parse_int("));
    }
}
