//! The client's modules import one another one way: read from the source (`src/`), the
//! `crate::` paths of each file form no circle. The crate root declares and re-exports every
//! module, so a name taken through the root (`crate::Limiter` rather than
//! `crate::limiter::Limiter`) counts as an import of the root, and closes a circle: each file
//! names the module that defines what it uses. No server needed: it reads the files.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The code of a line, without a `//` comment (doc comments included).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or(line)
}

/// A file's text, or a module folder's files one after another (the folder is one module here;
/// `the_files_of_a_module_folder_import_one_another_one_way` checks inside it).
fn source(path: &Path) -> String {
    if !path.is_dir() {
        return fs::read_to_string(path).expect("readable source");
    }
    folder(path).into_values().collect::<Vec<_>>().join("\n")
}

/// The `.rs` files of a module folder by name (`mod` for mod.rs).
fn folder(path: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(path).expect("readable folder") {
        let file = entry.expect("a directory entry").path();
        if file.extension().is_some_and(|e| e == "rs") {
            let name = file.file_stem().and_then(|s| s.to_str()).expect("a name");
            files.insert(
                name.to_string(),
                fs::read_to_string(&file).expect("readable"),
            );
        }
    }
    files
}

/// What each module imports: `lib` is `src/lib.rs`, which imports every module it declares.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in fs::read_dir(&src).expect("readable src") {
        let path = entry.expect("a directory entry").path();
        let Some(module) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text = source(&path);
        let mut uses: BTreeSet<String> = BTreeSet::new();
        for line in text.lines().map(code) {
            if module == "lib" {
                let declared = line.trim().trim_start_matches("pub ");
                if let Some(m) = declared.strip_prefix("mod ") {
                    uses.insert(m.trim_end_matches(';').to_string());
                }
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                uses.insert(name);
            }
        }
        uses.remove(module);
        graph.insert(module.to_string(), uses);
    }
    // A name that is no module (`crate::Limiter`, `crate::key_slot`) is the root's re-export.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        *uses = uses
            .iter()
            .map(|u| {
                if modules.contains(u) {
                    u.clone()
                } else {
                    "lib".to_string()
                }
            })
            .collect();
    }
    graph
}

/// A circle through `module`, if one is reachable from it (depth first).
fn circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    module: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|m| m == module) {
        let mut found = path[at..].to_vec();
        found.push(module.to_string());
        return Some(found);
    }
    if done.contains(module) {
        return None;
    }
    path.push(module.to_string());
    for next in graph.get(module).into_iter().flatten() {
        if let Some(found) = circle(graph, next, path, done) {
            return Some(found);
        }
    }
    path.pop();
    done.insert(module.to_string());
    None
}

#[test]
fn the_modules_import_one_another_one_way() {
    let graph = imports();
    assert!(graph["limiter"].contains("ledger"), "the source was read");
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(found) = circle(&graph, module, &mut Vec::new(), &mut done) {
            panic!("an import circle: {}", found.join(" -> "));
        }
    }
}

#[test]
fn the_files_of_a_module_folder_import_one_another_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders = 0;
    for entry in fs::read_dir(&src).expect("readable src") {
        let path = entry.expect("a directory entry").path();
        if !path.is_dir() {
            continue;
        }
        folders += 1;
        let files = folder(&path);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (name, text) in &files {
            let mut uses = BTreeSet::new();
            if name != "mod" {
                for line in text.lines().map(code) {
                    for (at, _) in line.match_indices("super::") {
                        let rest = &line[at + "super::".len()..];
                        let used: String = rest
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if files.contains_key(&used) && used != *name {
                            uses.insert(used);
                        }
                    }
                }
            }
            graph.insert(name.clone(), uses);
        }
        let mut done = BTreeSet::new();
        for module in graph.keys() {
            if let Some(found) = circle(&graph, module, &mut Vec::new(), &mut done) {
                panic!(
                    "an import circle in {}: {}",
                    path.display(),
                    found.join(" -> ")
                );
            }
        }
    }
    assert!(folders >= 1, "the login folder was read");
}
