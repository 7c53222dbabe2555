//! A config file's shape checked on the parser's event stream, before any tree is built: the
//! nesting depth (`RLS_CONFIG_MAX_DEPTH`) and what aliases expand to (`RLS_CONFIG_MAX_ALIAS_NODES`).
//! The tree would otherwise be built, walked and dropped by recursion (a deep file overflows a
//! thread's stack and aborts the process), and every alias is copied out in full (a 1 KB file of
//! nested aliases expands to gigabytes). The event stream is read by a loop, so neither can hurt
//! here; a file over either bound is refused by name and the last good config keeps answering.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};

/// The bounds of one config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YamlLimits {
    /// Mappings and lists open at once, aliases counted at the depth they expand to. A
    /// descriptor level takes two (its mapping and its `descriptors` list).
    pub max_depth: usize,
    /// Nodes (scalars, mappings, lists) that aliases add to a file once expanded, in total.
    pub max_alias_nodes: u64,
}

impl Default for YamlLimits {
    fn default() -> YamlLimits {
        YamlLimits {
            // 30 descriptor levels; each level costs a few KB of stack at most when the tree is
            // walked, far from a worker thread's 2 MB.
            max_depth: 64,
            // A node of the expanded tree takes about 100–200 bytes: tens of MB at most.
            max_alias_nodes: 100_000,
        }
    }
}

/// An anchored node: how many nodes and how many levels it adds where an alias repeats it.
#[derive(Clone, Copy, Default)]
struct Anchored {
    nodes: u64,
    height: usize,
}

/// A collection still open: where it started counting, and the deepest level seen inside.
struct Open {
    anchor: usize,
    nodes_at_start: u64,
    deepest: usize,
}

/// Refuses a file nested deeper than `max_depth` or whose aliases add more than
/// `max_alias_nodes`; parse errors are left to the loader, which reports them.
pub fn check(text: &str, limits: YamlLimits) -> Result<(), String> {
    let mut parser = Parser::new_from_str(text);
    let mut anchors: HashMap<usize, Anchored> = HashMap::new();
    let mut open: Vec<Open> = Vec::new();
    let mut nodes: u64 = 0;
    let mut alias_nodes: u64 = 0;
    loop {
        let Ok((event, mark)) = parser.next_token() else {
            return Ok(());
        };
        let depth = open.len();
        match event {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if depth + 1 > limits.max_depth {
                    return Err(format!(
                        "line {}: nested deeper than {} mappings and lists \
                         (RLS_CONFIG_MAX_DEPTH)",
                        mark.line(),
                        limits.max_depth
                    ));
                }
                nodes += 1;
                open.push(Open {
                    anchor,
                    nodes_at_start: nodes,
                    deepest: depth + 1,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(done) = open.pop() else { continue };
                if let Some(parent) = open.last_mut() {
                    parent.deepest = parent.deepest.max(done.deepest);
                }
                if done.anchor != 0 {
                    anchors.insert(
                        done.anchor,
                        Anchored {
                            nodes: nodes - done.nodes_at_start + 1,
                            height: done.deepest - depth + 1,
                        },
                    );
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                nodes += 1;
                if anchor != 0 {
                    anchors.insert(
                        anchor,
                        Anchored {
                            nodes: 1,
                            height: 0,
                        },
                    );
                }
            }
            Event::Alias(anchor) => {
                let a = anchors.get(&anchor).copied().unwrap_or_default();
                nodes = nodes.saturating_add(a.nodes);
                alias_nodes = alias_nodes.saturating_add(a.nodes);
                if alias_nodes > limits.max_alias_nodes {
                    return Err(format!(
                        "line {}: aliases expand to more than {} nodes \
                         (RLS_CONFIG_MAX_ALIAS_NODES)",
                        mark.line(),
                        limits.max_alias_nodes
                    ));
                }
                let reached = depth + a.height;
                if reached > limits.max_depth {
                    return Err(format!(
                        "line {}: an alias nests deeper than {} mappings and lists \
                         (RLS_CONFIG_MAX_DEPTH)",
                        mark.line(),
                        limits.max_depth
                    ));
                }
                if let Some(parent) = open.last_mut() {
                    parent.deepest = parent.deepest.max(reached);
                }
            }
            Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for i in 0..levels {
            let pad = "  ".repeat(2 * i);
            text += &format!("{pad}- key: k{i}\n{pad}  descriptors:\n");
        }
        text
    }

    fn aliases(levels: usize) -> String {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..levels {
            let p = i - 1;
            text += &format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            );
        }
        text
    }

    #[test]
    fn depth_is_counted_on_the_stream() {
        let limits = YamlLimits::default();
        // Root mapping + (mapping, list) per level: 1 + 1 + 2 × 31 = 64 with the last
        // `descriptors:` empty (a null, not a list).
        assert!(check(&nested(31), limits).is_ok());
        let err = check(&nested(40), limits).unwrap_err();
        assert!(err.contains("RLS_CONFIG_MAX_DEPTH"), "{err}");
        // Deep enough to overflow any recursion: refused, and checking it is a loop.
        assert!(check(&nested(20_000), limits).is_err());
        // Flow style too.
        let flow = format!("a: {}{}", "[".repeat(100), "]".repeat(100));
        assert!(check(&flow, limits).is_err());
    }

    #[test]
    fn aliases_are_counted_before_they_expand() {
        let limits = YamlLimits::default();
        // 10 + 100 + 1,000 + 10,000 nodes: within.
        assert!(check(&aliases(4), limits).is_ok());
        // Seven levels would expand to 10^7 nodes (gigabytes): refused at the count.
        let err = check(&aliases(7), limits).unwrap_err();
        assert!(err.contains("RLS_CONFIG_MAX_ALIAS_NODES"), "{err}");
        // An alias of a deep anchor placed deeper still.
        let deep = format!(
            "a: &a {}{}\nb: {}*a{}\n",
            "[".repeat(40),
            "]".repeat(40),
            "[".repeat(30),
            "]".repeat(30)
        );
        let err = check(&deep, limits).unwrap_err();
        assert!(err.contains("an alias nests deeper"), "{err}");
    }
}
