//! The Rust snippets of the docs compile: docs/client.md's are doctests of the crate (lib.rs
//! includes the file); README.md's are in `client/examples/readme.rs`, verbatim, which this test
//! checks (the examples are compiled with the tests).

use std::path::Path;

/// The ```rust blocks of a Markdown file.
fn rust_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, fence) if fence.starts_with("```rust") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_readme_snippet_is_compiled_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("client/examples/readme.rs")).unwrap();
    let blocks = rust_blocks(&readme);
    assert!(!blocks.is_empty(), "README.md has no Rust snippet any more");
    for block in blocks {
        assert!(
            example.contains(&block),
            "README.md snippet not in client/examples/readme.rs:\n{block}"
        );
    }
}

#[test]
fn the_guide_is_compiled_as_doctests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    assert!(lib.contains("include_str!(\"../../docs/client.md\")"));
    let guide = std::fs::read_to_string(root.join("../docs/client.md")).unwrap();
    // Every code block that rustdoc would compile is Rust on purpose: the others name their
    // language (toml, sh), or rustdoc would try them as Rust.
    let untagged_openers = guide
        .lines()
        .scan(false, |open, l| {
            let fence = l.trim_end().starts_with("```");
            let opener = fence && !*open;
            if fence {
                *open = !*open;
            }
            Some(opener && l.trim_end() == "```")
        })
        .filter(|o| *o)
        .count();
    assert_eq!(
        untagged_openers, 0,
        "a code block without a language in docs/client.md"
    );
    assert!(rust_blocks(&guide).len() >= 4);
}
