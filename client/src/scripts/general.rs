//! The general entry's share of the library: only the statements the entry reaches.
//!
//! A script keeps nothing between calls, so its general entry builds the library afresh on every
//! call it takes: each top-level function a closure, each table filled. Built whole, that was
//! about 400,000 instructions a call, three quarters of the call (closures capturing some 150
//! open upvalues, each capture a walk of them): 3 to 4 times FCALL, where the library is built
//! once. So each script's general entry carries the top-level statements its function reaches
//! and no other, in the library's order.
//!
//! A statement starts at a line whose first character begins a name (not `end`, `else`,
//! `elseif` or `until`) outside a block comment, and runs to the next. It defines the names a
//! `local` declares, the table a `function t.f` or `function t:f` fills, or the top-level names
//! its lines assign or fill (`t[k] = …`, `t.f = …`: the loops that fill a table). The roots are
//! the registrations of the entry (or, where no registration names it, those that name none,
//! which register in a loop) and any statement that defines nothing. From them, every statement
//! defining a name their code mentions is taken, until none is added: `t.f` takes t's own
//! statements and its function f, `t` alone (passed on, indexed) all of t's functions. Words in
//! strings and after a `.` or `:` (fields) name nothing; any other word is taken for a name, so a
//! word too many keeps a statement too many, never drops one a call needs (a local cannot be
//! reached by a computed name). The same walk, from the hot section's code, picks the
//! definitions a script's hot path takes from before the general section (`reached`).

use std::collections::{HashMap, HashSet};

/// `library`'s lines that `entry`'s general entry needs, in order.
pub(super) fn needed<'a>(library: &[&'a str], entry: &str) -> Vec<&'a str> {
    let index = Index::of(library);
    let quoted = format!("'{entry}'");
    let literal =
        |c: &str| c.contains("redis.register_function('") || c.contains("function_name = '");
    let registered_by_name = index
        .codes
        .iter()
        .any(|c| c.contains("redis.register_function") && c.contains(&quoted));
    let roots = index.codes.iter().enumerate().filter_map(|(i, c)| {
        let root = if c.contains("redis.register_function") {
            if registered_by_name {
                c.contains(&quoted)
            } else {
                !literal(c)
            }
        } else {
            // Code that defines nothing is kept; nothing but comments is dropped.
            !index.defines_something.get(i).copied().unwrap_or(true) && !c.trim().is_empty()
        };
        root.then_some(i)
    });
    index.walk(roots.collect(), "")
}

/// `library`'s lines that `code` reaches (what it names, and theirs), in order: the definitions
/// a script's hot path takes from before the general section.
pub(super) fn reached<'a>(library: &[&'a str], code: &[&str]) -> Vec<&'a str> {
    let code: Vec<String> = code.iter().map(|l| unquoted(code_of(l))).collect();
    Index::of(library).walk(Vec::new(), &code.join("\n"))
}

/// A library's statements, their code, and which statements define each key (a name; `t.f`
/// and `t.*` for a table's functions).
struct Index<'a> {
    statements: Vec<Vec<&'a str>>,
    codes: Vec<String>,
    by_key: HashMap<String, Vec<usize>>,
    defines_something: Vec<bool>,
}

impl<'a> Index<'a> {
    fn of(library: &[&'a str]) -> Self {
        let (statements, codes) = statements(library);
        let declared: HashSet<&str> = codes.iter().flat_map(|c| declares(c)).collect();
        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        let mut defines_something = vec![false; codes.len()];
        for (i, c) in codes.iter().enumerate() {
            for key in defines(c, &declared) {
                by_key.entry(key).or_default().push(i);
                defines_something[i] = true;
            }
        }
        Index {
            statements,
            codes,
            by_key,
            defines_something,
        }
    }

    /// The lines of the statements `roots`, of those `code` names, and of every statement
    /// defining what those name, until none is added.
    fn walk(&self, mut queue: Vec<usize>, code: &str) -> Vec<&'a str> {
        let mut wanted = vec![false; self.statements.len()];
        let mut seen: HashSet<String> = HashSet::new();
        let mut take = |used: &str, queue: &mut Vec<usize>| {
            for (name, field) in references(used) {
                // `t.f` needs t and its function f; `t` alone (passed on, indexed) all of t's.
                for key in [name.to_string(), format!("{name}.{}", field.unwrap_or("*"))] {
                    if let Some(found) = self.by_key.get(&key).filter(|_| !seen.contains(&key)) {
                        queue.extend(found.iter().copied());
                    }
                    seen.insert(key);
                }
            }
        };
        take(code, &mut queue);
        while let Some(i) = queue.pop() {
            if std::mem::replace(&mut wanted[i], true) {
                continue;
            }
            // (A `local`'s own names are not uses of them.)
            let code = unquoted(&self.codes[i]);
            let used = match code.strip_prefix("local function ") {
                Some(rest) => rest.split_once('(').map_or("", |(_, r)| r),
                None if code.starts_with("local ") => code.split_once('=').map_or("", |(_, r)| r),
                None => &code,
            };
            take(used, &mut queue);
        }
        self.statements
            .iter()
            .zip(&wanted)
            .filter(|(_, w)| **w)
            .flat_map(|(s, _)| s.iter().copied())
            .collect()
    }
}

/// The library's top-level statements, each its lines (a statement's trailing comments with it),
/// and each one's code (its lines without comments).
fn statements<'a>(lines: &[&'a str]) -> (Vec<Vec<&'a str>>, Vec<String>) {
    let mut out: Vec<Vec<&str>> = vec![Vec::new()];
    let mut codes = vec![String::new()];
    let mut block = false;
    for line in lines {
        let starts = !block
            && starts_name(line)
            && !["end", "else", "elseif", "until"]
                .iter()
                .any(|k| line.split(|c: char| !is_word(c)).next() == Some(*k));
        if starts {
            out.push(Vec::new());
            codes.push(String::new());
        }
        if let (Some(last), Some(code)) = (out.last_mut(), codes.last_mut()) {
            last.push(line);
            if !block {
                code.push_str(code_of(line));
                code.push('\n');
            }
        }
        let comment = &line[code_of(line).len()..];
        if block {
            block = !line.contains("]]");
        } else if let Some(rest) = comment.strip_prefix("--[[") {
            block = !rest.contains("]]");
        }
    }
    (out, codes)
}

/// A line's code: up to a `--` outside a quoted string.
pub(super) fn code_of(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut quote = None;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => return &line[..i],
            None => {}
        }
        i += 1;
    }
    line
}

/// `code` with its quoted strings emptied (`'…'` becomes `''`): a word in one names nothing.
fn unquoted(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut quote = None;
    let mut escaped = false;
    for c in code.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => {
                quote = None;
                out.push(c);
            }
            Some(_) => {}
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `text` starts a name (not a number).
fn starts_name(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// Whether `text` (what follows a word) reads a field of it: `.f` or `:f`, not `..`.
fn reads_field(text: &str) -> bool {
    text.starts_with(':') || (text.starts_with('.') && !text.starts_with(".."))
}

/// The words of `code` that can be names.
fn words(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !is_word(c)).filter(|w| starts_name(w))
}

/// The names `code` refers to, each with the field it reads when it is `t.f` or `t:f`: not the
/// fields themselves (a word after `..` is a concatenation's operand).
fn references(code: &str) -> Vec<(&str, Option<&str>)> {
    let mut out = Vec::new();
    let mut at = 0;
    for w in code.split(|c: char| !is_word(c)) {
        let (start, end) = (at, at + w.len());
        at = end + 1;
        let before = code.get(..start).unwrap_or("");
        let field = before.ends_with(':') || (before.ends_with('.') && !before.ends_with(".."));
        if field || !starts_name(w) {
            continue;
        }
        let after = code.get(end..).unwrap_or("");
        let read = reads_field(after)
            .then(|| after.get(1..))
            .flatten()
            .and_then(|rest| words(rest).next().filter(|f| rest.starts_with(f)));
        out.push((w, read));
    }
    out
}

/// The names a `local` statement declares (none for another statement).
/// On its first line, each `local` after the first declares too (`local a = 0 local function
/// f() … end`, a line a test puts in the clock's place): a name a function's body declares there
/// only keeps the statement for a use of that name elsewhere, one statement too many at most.
fn declares(code: &str) -> Vec<&str> {
    if !code.starts_with("local ") {
        return Vec::new();
    }
    let first = code.lines().next().unwrap_or("");
    first
        .split("local ")
        .skip(1)
        .filter(|part| !part.is_empty())
        .flat_map(|part| {
            let head = part.strip_prefix("function ").unwrap_or(part);
            words(head.split(['=', '(']).next().unwrap_or(""))
        })
        .collect()
}

/// The keys a statement defines: the names it declares, `t.f` and `t.*` for a `function t.f`
/// (or `t:f`), or the top-level names (of `declared`) its lines assign or fill.
fn defines(code: &str, declared: &HashSet<&str>) -> Vec<String> {
    if code.starts_with("local ") {
        return declares(code).into_iter().map(String::from).collect();
    }
    if let Some(head) = code.strip_prefix("function ") {
        let head = head.split('(').next().unwrap_or("");
        return match head.split_once(['.', ':']) {
            Some((table, f)) => vec![format!("{table}.{f}"), format!("{table}.*")],
            None => vec![head.to_string()],
        };
    }
    let mut out: Vec<String> = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        let Some(name) = words(line).next().filter(|n| line.starts_with(n)) else {
            continue;
        };
        let rest = line[name.len()..].trim_start();
        let assigns =
            rest.starts_with(['[', '.']) || (rest.starts_with('=') && !rest.starts_with("=="));
        if assigns && declared.contains(name) && !out.iter().any(|o| o == name) {
            out.push(name.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::needed;

    const LIBRARY: &str = "\
--[[
local function in_a_comment() end
]]
local LIMIT = 10
local function fail(text) error({ err = text }, 0) end
local function unused() return 'fail' end
local t = { n = LIMIT }
function t.f() return t.n end
function t.g() fail('a t.f in a string') end
local u = {}
function u.a() return 1 end
function u:b() return 2 end
local REGISTRY = {}
for i = 1, 2 do
  REGISTRY[i] = u
end
local function all_of_u() return REGISTRY end
local function concat(x) return 'x' ..fail end
local test_now = 0 local function clock() return test_now end
redis.register_function('one', function() return t.f() end)
redis.register_function('two', function() return t.g() end)
redis.register_function('three', function() return all_of_u() end)
redis.register_function('four', function() return concat() end)
redis.register_function('five', function() return clock() end)";

    fn kept(entry: &str) -> String {
        let lines: Vec<&str> = LIBRARY.lines().collect();
        needed(&lines, entry).join("\n")
    }

    #[test]
    fn an_entry_keeps_what_its_code_names_and_no_more() {
        let one = kept("one");
        // t.f names t (its definition, which names LIMIT) and t's f, not t's g nor fail.
        assert!(one.contains("local t = { n = LIMIT }"));
        assert!(one.contains("local LIMIT = 10"));
        assert!(one.contains("function t.f()"));
        assert!(!one.contains("function t.g()"), "{one}");
        assert!(!one.contains("local function fail("), "{one}");
        assert!(!one.contains("unused"), "{one}");
        assert!(
            !one.contains("in_a_comment"),
            "a block comment is no statement: {one}"
        );
        assert!(one.contains("'one'") && !one.contains("'two'"));
        // t.g calls fail; the `t.f` in its string names nothing.
        let two = kept("two");
        assert!(two.contains("local function fail(") && two.contains("function t.g()"));
        assert!(!two.contains("function t.f()"), "{two}");
        // u passed on as a value (the loop fills REGISTRY with it): all of u's functions, and
        // the loop that fills REGISTRY.
        let three = kept("three");
        assert!(three.contains("function u.a()") && three.contains("function u:b()"));
        assert!(three.contains("REGISTRY[i] = u"));
        assert!(!three.contains("local t = "), "{three}");
        // A word after `..` is a concatenation's operand, a name.
        assert!(kept("four").contains("local function fail("));
        // A second `local` on a statement's first line declares too.
        assert!(kept("five").contains("local function clock()"));
    }
}
