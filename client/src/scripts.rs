//! The scripts backend: where `FUNCTION` is refused (Redis 6.2, a managed plan, an ACL without
//! it), each function of the library is served as its own script through `EVALSHA`, generated
//! from the one library source the client carries, never a second copy (docs/functions.md,
//! backends). A server that does not hold a script yet (`NOSCRIPT`: a restart, a failover, a
//! new Cluster node) gets it with `EVAL`, which runs the call and caches the script there.
//!
//! The file (the `#!lua` line dropped: `EVAL` reads `#!lua` as its own shebang) is the body of
//! one function, the general entry, its `redis.register_function` collecting the library's
//! functions in a table and `fast` taken as no hot path (the script has run it): of the file,
//! only the top-level statements the function reaches (scripts/general.rs), since a script keeps
//! nothing between calls and builds its general entry afresh on each call that takes it. That
//! function names nothing outside itself, so creating it costs one closure: what is not run is
//! not built. For a function with a hot path (its tag on the line
//! `local HOT = { name = 'tag', ... }`), that path comes first, as the script's
//! own code in a block of its own, not a closure (one with its upvalues cost more than the
//! decision): the definitions before `-- @scripts: general` that the hot section (between
//! `-- @scripts: hot` and `-- @scripts: end hot`) names (a walk over their names), the hot
//! section up to `fast`, fast's parameters bound to the tag and nil, fast's own lines before
//! `-- @scripts: memory`, the memory's names declared without values (the line after that mark),
//! its closure's parameters bound to `KEYS` and `ARGV`, and the lines between `-- @scripts: body`
//! and `-- @scripts: end body` in `repeat … until true`, each whole line `return general(keys,
//! args)` made a `break` (`now` kept first when it passes it); after the block the general entry
//! is defined and called, so a call the hot path answers creates no closure for it (about 300
//! instructions). A function without a hot path calls the general entry.
//! scripts/benchkit/lua.py generates them the same way for the bench.

use std::collections::HashMap;
use std::sync::OnceLock;

mod general;

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
    let at = |mark: &str| lines.iter().position(|l| l.trim() == mark);
    let (general, hot, end) = (
        at("-- @scripts: general")?,
        at("-- @scripts: hot")?,
        at("-- @scripts: end hot")?,
    );
    if !(general < hot && hot < end) {
        return None;
    }
    let fast = (hot..end).find(|&i| {
        lines
            .get(i)
            .is_some_and(|l| l.starts_with("local function fast("))
    })?;
    let library = [
        lines.get(1..fast)?,
        // The script has run the hot path when the general entry does: registration takes the
        // body, and fast's own definition (to the end of the hot section) is left out.
        &["local fast = function(_, body) return body end"],
        lines.get(end + 1..)?,
    ]
    .concat();
    let library = general::needed(&library, entry)
        .join("\n")
        .replace("redis.register_function", "register_entry");
    let general_entry = format!(
        "local function general_entry(keys, args, now)\n\
         local registered_entries = {{}}\n\
         local function register_entry(name, callback)\n\
         \x20 if type(name) == 'table' then name, callback = name.function_name, name.callback end\n\
         \x20 registered_entries[name] = callback\n\
         end\n\
         {library}\n\
         return registered_entries['{entry}'](keys, args, now)\n\
         end"
    );
    let Some(tag) = hot_tag(&lines, entry) else {
        return Some(format!(
            "{general_entry}\nreturn general_entry(KEYS, ARGV)\n"
        ));
    };
    let (memory, body, body_end) = (
        at("-- @scripts: memory")?,
        at("-- @scripts: body")?,
        at("-- @scripts: end body")?,
    );
    if !(fast < memory && memory + 1 < body && body < body_end && body_end < end) {
        return None;
    }
    let forgotten = lines.get(memory + 1)?.trim().strip_prefix("local ")?;
    let forgotten = forgotten.split(" = ").next()?;
    // The definitions the hot section names, and theirs.
    let definitions = general::reached(lines.get(1..general)?, lines.get(hot..=end)?);
    // The hot path in a block of its own (its locals out of sight of the general entry defined
    // after it), its body in `repeat … until true`: a line `return general(keys, args)` becomes
    // `break`, `return general(keys, args, now)` keeps `now` first, and the general entry, a
    // closure created only then, is called after the block.
    let fast_params = parameters(lines.get(fast)?)?;
    let (_, general) = fast_params.split_once(',')?;
    let general = general.trim();
    let body_params = parameters(lines.get(body - 1)?)?;
    let fallback = format!("return {general}({body_params})");
    let fallback_now = format!("return {general}({body_params}, now)");
    let mut out = vec!["local general_now".to_string(), "do".to_string()];
    out.extend(definitions.iter().map(|l| l.to_string()));
    out.extend(lines.get(hot..fast)?.iter().map(|l| l.to_string()));
    out.push(format!("local {fast_params} = '{tag}', nil"));
    out.extend(lines.get(fast + 1..memory)?.iter().map(|l| l.to_string()));
    out.push(format!("local {forgotten}"));
    out.push(format!("local {body_params} = KEYS, ARGV"));
    out.push("repeat".to_string());
    let start = out.len();
    for line in lines.get(body + 1..body_end)? {
        let indent = &line[..line.len() - line.trim_start().len()];
        out.push(match line.trim() {
            l if l == fallback => format!("{indent}do break end"),
            l if l == fallback_now => format!("{indent}do general_now = now break end"),
            _ => line.to_string(),
        });
    }
    // Every call of the general entry was one of those lines: it is not defined in the block.
    // And no loop: a `break` inside one would leave the loop, not the block, and the hot path
    // would go on where the general entry should have answered.
    let rest: Vec<&str> = out[start..].iter().map(String::as_str).collect();
    let rest = code(&rest);
    if names_word(&rest, general)
        || ["for", "while", "repeat"]
            .iter()
            .any(|w| names_word(&rest, w))
    {
        return None;
    }
    out.push("until true".to_string());
    out.push("end".to_string());
    out.push(general_entry);
    out.push("return general_entry(KEYS, ARGV, general_now)".to_string());
    out.push(String::new());
    Some(out.join("\n"))
}

/// The parameters of the function a line opens: `... function name(a, b)` gives `a, b`.
fn parameters(line: &str) -> Option<&str> {
    let (_, rest) = line.split_once('(')?;
    Some(rest.split_once(')')?.0)
}

/// The tag of `entry`'s hot path on the line `local HOT = { name = 'tag', ... }`, or None.
fn hot_tag<'a>(lines: &[&'a str], entry: &str) -> Option<&'a str> {
    let line = lines.iter().find(|l| l.starts_with("local HOT = {"))?;
    let from = format!("{entry} = '");
    let at = line.match_indices(&from).map(|(at, _)| at).find(|&at| {
        !line
            .get(..at)
            .is_some_and(|l| l.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    })?;
    let rest = line.get(at + from.len()..)?;
    Some(rest.split_once('\'')?.0)
}

/// The code of `lines` without their comments (a word in one is no use), one line each.
fn code(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| format!("\n{}", general::code_of(l)))
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

    /// The hot path's fallbacks become `break`s out of its block: a loop in its body would
    /// catch them, so the generator refuses one (as it refuses a call of the general entry
    /// that is not a whole line) rather than make a script that decides on past a fallback.
    #[test]
    fn a_loop_in_the_hot_body_is_refused() {
        assert!(generate(LIBRARY_SOURCE, "rl_gcra").is_some());
        let mark = "    -- @scripts: body\n";
        assert!(LIBRARY_SOURCE.contains(mark));
        let looped = LIBRARY_SOURCE.replacen(mark, &format!("{mark}    for _ = 1, 1 do end\n"), 1);
        assert!(generate(&looped, "rl_gcra").is_none());
    }

    /// Every function the library registers that a client may call has a script: one per
    /// algorithm of the registry (`rl_<word>`, registered by the library's loop over its list)
    /// and each registered by name, but the module-only ones (they only say they need the
    /// module). A new algorithm or entry fails here, naming it, until `ENTRIES` lists it.
    #[test]
    fn entries_are_every_function_of_the_library() {
        let mut wanted: Vec<String> = ratelimit_core::algo::listed::REGISTRY
            .iter()
            .map(|l| format!("rl_{}", l.word.to_lowercase()))
            .collect();
        for line in LIBRARY_SOURCE.lines() {
            let named = line
                .split_once("redis.register_function('")
                .or_else(|| line.split_once("function_name = '"))
                .and_then(|(_, rest)| rest.split_once('\''));
            if let Some((name, _)) = named {
                wanted.push(name.to_string());
            }
        }
        assert!(wanted.len() > ENTRIES.len() / 2, "the library was read");
        for name in wanted {
            assert!(
                ENTRIES.contains(&name.as_str()),
                "client/src/scripts.rs: ENTRIES lacks {name}, a function of the library"
            );
        }
    }

    /// The bench's scripts (scripts/benchkit/lua.py) are the client's, text for text.
    #[test]
    fn the_bench_generates_the_same_scripts() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
        for e in ENTRIES {
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
        // The hot path builds only what it uses, and no function but the clock: no error texts,
        // no argument parsing, no closure per call.
        let gcra = &script("rl_gcra").unwrap().text;
        let (hot, general) = gcra.split_once("local function general_entry(").unwrap();
        assert!(gcra.ends_with("end\nreturn general_entry(KEYS, ARGV, general_now)\n"));
        assert!(general.contains("local function parse_int("));
        let code: Vec<&str> = hot
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect();
        let functions: Vec<&&str> = code.iter().filter(|l| l.contains("function")).collect();
        assert_eq!(functions.len(), 1, "{functions:?}");
        assert!(functions[0].starts_with("local function now_ms("));
        // A function without a hot path is its general entry alone.
        assert!(script("rl_peek")
            .unwrap()
            .text
            .ends_with("end\nreturn general_entry(KEYS, ARGV)\n"));
    }

    /// A general entry builds what its function reaches, not the whole library, on every call
    /// it takes (scripts/general.rs): the version its constant, the concurrency limit no
    /// algorithm, an algorithm no other entry.
    #[test]
    fn a_general_entry_builds_only_what_its_function_reaches() {
        let text = |e: &str| script(e).map(|s| s.text.as_str()).unwrap_or("");
        assert!(text("rl_version").contains("local LIBRARY_VERSION = "));
        assert!(
            text("rl_version").lines().count() < 20,
            "{}",
            text("rl_version")
        );
        assert!(text("rl_concurrency").contains("function concurrency.call("));
        assert!(!text("rl_concurrency").contains("local LIST = "));
        let log = text("rl_slidinglog");
        assert!(log.contains("function log.check(") && log.contains("local LIST = "));
        for other in [
            "local function settle_all(",
            "function shares.call(",
            "local function all(",
        ] {
            assert!(!log.contains(other), "{other}");
        }
        // Each a part of the library's own lines: fast's definition is the script's stub.
        assert!(!text("rl_gcra")
            .split_once("local function general_entry(")
            .is_some_and(|(_, general)| general.contains("local function fast(")));
    }
}
