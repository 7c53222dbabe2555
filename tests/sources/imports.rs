//! Which file of a crate names which: every path a file writes that starts `crate::`,
//! `$crate::`, `super::`, `self::` or with one of its module's own submodules, in `use`
//! declarations and in code (macro bodies included), resolved to the file that defines the
//! module it reaches. A name taken through a re-export counts as an arrow to the file that
//! re-exports it (`crate::Limiter` is an arrow to `lib.rs`, which re-exports it), so a file
//! names the module that defines what it uses. Declaring a submodule (`mod x;`) is no arrow.
//! Modules brought in with `#[path]` are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::{relative, tokens, Token};

/// One arrow: the file that names, the file named, and the line of the first such name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrow {
    pub from: String,
    pub to: String,
    pub line: usize,
}

/// A crate's module tree: each module path (`[]` for the root) and the file that holds it.
struct Tree {
    files: BTreeMap<Vec<String>, PathBuf>,
    /// Modules declared inline (`mod tests { … }`) and the file they are in.
    inline: BTreeMap<Vec<String>, PathBuf>,
}

impl Tree {
    fn is_module(&self, path: &[String]) -> bool {
        self.files.contains_key(path) || self.inline.contains_key(path)
    }

    fn file(&self, path: &[String]) -> Option<&PathBuf> {
        self.files.get(path).or_else(|| self.inline.get(path))
    }
}

/// `mod NAME;` (a file) and `mod NAME {` (inline) declarations of a file, with the module
/// path of each, the file's own module being `module`.
fn declarations(text: &str, module: &[String]) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let toks = tokens(text);
    let (mut files, mut inline) = (Vec::new(), Vec::new());
    // The inline modules open at each brace depth.
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut path_attribute = false;
    for (i, (tok, _)) in toks.iter().enumerate() {
        match tok {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if stack.last().is_some_and(|&(_, d)| d == depth) {
                    stack.pop();
                }
            }
            Token::Word(w)
                if w == "path" && matches!(toks.get(i + 1), Some((Token::Punct('='), _))) =>
            {
                path_attribute = true;
            }
            Token::Word(w) if w == "mod" => {
                let (Some((Token::Word(name), _)), Some((next, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                else {
                    continue;
                };
                let mut path = module.to_vec();
                path.extend(stack.iter().map(|(m, _)| m.clone()));
                path.push(name.clone());
                if *next == Token::Punct(';') {
                    if !std::mem::take(&mut path_attribute) {
                        files.push(path);
                    }
                } else if *next == Token::Punct('{') {
                    stack.push((name.clone(), depth));
                    inline.push(path);
                }
            }
            _ => {}
        }
    }
    (files, inline)
}

/// The file of module `name` declared in `parent` (a file holding module `parent_is_dir`
/// children in its own directory when it is a crate root or a `mod.rs`).
fn child_file(parent: &Path, name: &str) -> Option<PathBuf> {
    let stem = parent.file_stem()?.to_str()?;
    let dir = parent.parent()?;
    let own = if stem == "mod" || stem == "lib" || stem == "main" || is_root_file(parent) {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        own.join(format!("{name}.rs")),
        own.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// A crate root other than lib.rs/main.rs: a test, example or bench file.
fn is_root_file(path: &Path) -> bool {
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    matches!(parent, Some("tests" | "examples" | "benches" | "bin"))
}

fn tree(root: &Path) -> Tree {
    let mut tree = Tree {
        files: BTreeMap::new(),
        inline: BTreeMap::new(),
    };
    let mut todo = vec![(Vec::new(), root.to_path_buf())];
    while let Some((module, file)) = todo.pop() {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let (files, inline) = declarations(&text, &module);
        for path in inline {
            tree.inline.insert(path, file.clone());
        }
        for path in files {
            // The file of an inline module's child sits in the inline module's directory;
            // none here declares one, so only direct children are followed.
            if path.len() != module.len() + 1 {
                continue;
            }
            if let Some(child) = child_file(&file, &path[path.len() - 1]) {
                todo.push((path, child));
            }
        }
        tree.files.insert(module, file);
    }
    tree
}

/// The paths of a `use` tree starting at token `i` (after `use`), and the index after its `;`.
fn use_paths(toks: &[(Token, usize)], mut i: usize) -> (Vec<(Vec<String>, usize)>, usize) {
    let mut out = Vec::new();
    // The prefix at each open brace, and the path being read.
    let mut prefixes: Vec<Vec<String>> = vec![Vec::new()];
    let mut current: Vec<String> = Vec::new();
    let mut line = toks.get(i).map_or(0, |t| t.1);
    let mut alias = false;
    while let Some((tok, l)) = toks.get(i) {
        i += 1;
        match tok {
            Token::Word(w) if w == "as" => alias = true,
            Token::Word(w) => {
                if std::mem::take(&mut alias) {
                    continue;
                }
                if current.is_empty() {
                    current = prefixes.last().cloned().unwrap_or_default();
                    line = *l;
                }
                if w != "self" || current.is_empty() {
                    current.push(w.clone());
                }
            }
            Token::Punct('$') => {}
            Token::Punct('*') if current.is_empty() => {
                current = prefixes.last().cloned().unwrap_or_default();
            }
            Token::Path => {}
            Token::Punct('{') => {
                let prefix = if current.is_empty() {
                    prefixes.last().cloned().unwrap_or_default()
                } else {
                    std::mem::take(&mut current)
                };
                prefixes.push(prefix);
            }
            Token::Punct(',') | Token::Punct('}') | Token::Punct(';') => {
                if !current.is_empty() {
                    out.push((std::mem::take(&mut current), line));
                }
                if *tok == Token::Punct('}') {
                    prefixes.pop();
                }
                if *tok == Token::Punct(';') {
                    break;
                }
            }
            _ => {}
        }
    }
    (out, i)
}

/// Every path a file writes that may lead into its own crate, each with the module it is
/// written in and its line.
fn paths(text: &str, module: &[String], tree: &Tree) -> Vec<(Vec<String>, Vec<String>, usize)> {
    let toks = tokens(text);
    let mut out = Vec::new();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let here = |stack: &[(String, usize)]| {
        let mut m = module.to_vec();
        m.extend(stack.iter().map(|(n, _)| n.clone()));
        m
    };
    let mut i = 0;
    while let Some((tok, line)) = toks.get(i) {
        match tok {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if stack.last().is_some_and(|&(_, d)| d == depth) {
                    stack.pop();
                }
            }
            Token::Word(w) if w == "mod" => {
                if let (Some((Token::Word(name), _)), Some((Token::Punct('{'), _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    stack.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Token::Word(w) if w == "use" => {
                let (found, next) = use_paths(&toks, i + 1);
                let m = here(&stack);
                out.extend(found.into_iter().map(|(p, l)| (m.clone(), p, l)));
                i = next;
                continue;
            }
            Token::Word(w) if matches!(toks.get(i + 1), Some((Token::Path, _))) => {
                let after_path = i > 0 && matches!(toks[i - 1].0, Token::Path);
                let m = here(&stack);
                let mut child = m.clone();
                child.push(w.clone());
                let anchored =
                    matches!(w.as_str(), "crate" | "super" | "self") || tree.is_module(&child);
                if !after_path && anchored {
                    let mut path = vec![w.clone()];
                    let mut j = i + 1;
                    while let (Some((Token::Path, _)), Some((Token::Word(next), _))) =
                        (toks.get(j), toks.get(j + 1))
                    {
                        path.push(next.clone());
                        j += 2;
                    }
                    out.push((m, path, *line));
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The module a path written in module `at` reaches, and the name after it (None when the
/// path ends at a module), or None when it leaves the crate.
fn resolve(tree: &Tree, at: &[String], path: &[String]) -> Option<(Vec<String>, Option<String>)> {
    let mut base = at.to_vec();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = base.clone();
            child.push(first.to_string());
            if !tree.is_module(&child) {
                return None;
            }
        }
        None => return None,
    }
    for (n, seg) in rest.iter().enumerate() {
        let mut next = base.clone();
        next.push(seg.clone());
        if !tree.is_module(&next) {
            return Some((base, Some(rest[n].clone())));
        }
        base = next;
    }
    Some((base, None))
}

/// The names a file takes from other crates with `use` (`pub use ratelimit_core::algo;`):
/// a path through them leaves the crate.
fn external_names(text: &str, module: &[String], tree: &Tree) -> BTreeSet<String> {
    let toks = tokens(text);
    let mut names = BTreeSet::new();
    for (i, (tok, _)) in toks.iter().enumerate() {
        if *tok == Token::Word("use".into()) {
            for (path, _) in use_paths(&toks, i + 1).0 {
                if resolve(tree, module, &path).is_none() {
                    if let Some(last) = path.last() {
                        names.insert(last.clone());
                    }
                }
            }
        }
    }
    names
}

/// Every arrow between two files of the crate whose root is `root`.
pub fn arrows(root: &Path) -> Vec<Arrow> {
    let tree = tree(root);
    let mut external: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &tree.files {
        if let Ok(text) = fs::read_to_string(file) {
            external.insert(file.clone(), external_names(&text, module, &tree));
        }
    }
    let mut found: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (module, file) in &tree.files {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        for (at, path, line) in paths(&text, module, &tree) {
            let Some((target, name)) = resolve(&tree, &at, &path) else {
                continue;
            };
            let Some(to) = tree.file(&target) else {
                continue;
            };
            if name.is_some_and(|n| external.get(to).is_some_and(|e| e.contains(&n))) {
                continue;
            }
            if to != file {
                found.entry((relative(file), relative(to))).or_insert(line);
            }
        }
    }
    found
        .into_iter()
        .map(|((from, to), line)| Arrow { from, to, line })
        .collect()
}

/// The circles among `arrows`, each as its arrows in order, each circle once (by its files).
pub fn circles(arrows: &[Arrow]) -> Vec<Vec<Arrow>> {
    let mut graph: BTreeMap<&str, Vec<&Arrow>> = BTreeMap::new();
    for a in arrows {
        graph.entry(&a.from).or_default().push(a);
    }
    let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    let mut out = Vec::new();
    // A shortest circle through each arrow (breadth first from its head back to its tail).
    for first in arrows {
        let mut back: BTreeMap<&str, &Arrow> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([first.to.as_str()]);
        let mut reached = first.to == first.from;
        while let Some(node) = queue.pop_front() {
            if node == first.from {
                reached = true;
                break;
            }
            for a in graph.get(node).into_iter().flatten() {
                if a.to != first.to && !back.contains_key(a.to.as_str()) {
                    back.insert(&a.to, a);
                    queue.push_back(&a.to);
                }
            }
        }
        if !reached {
            continue;
        }
        let mut circle = vec![first.clone()];
        let mut node = first.from.as_str();
        while node != first.to {
            let Some(a) = back.get(node) else { break };
            circle.insert(1, (*a).clone());
            node = &a.from;
        }
        let files: BTreeSet<String> = circle.iter().map(|a| a.from.clone()).collect();
        if seen.insert(files) {
            out.push(circle);
        }
    }
    out
}
