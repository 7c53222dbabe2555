//! A wildcard value (`value: foo*bar*baz`): each `*` matches any run of characters, the empty one
//! included, as envoyproxy/ratelimit matches. The pattern is the composite `key_value`, split on
//! `*` once at load; a request's composite `key_value` matches when it starts with the first
//! part, ends with the last, and holds the middle parts in order between them, without overlap.

/// One wildcard entry of a config level: its composite key and the literal runs between stars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wildcard {
    pub composite: String,
    parts: Vec<String>,
}

impl Wildcard {
    /// `None` when the composite holds no `*` (an exact entry).
    pub fn new(composite: &str) -> Option<Wildcard> {
        composite.contains('*').then(|| Wildcard {
            composite: composite.to_string(),
            parts: composite.split('*').map(str::to_string).collect(),
        })
    }

    pub fn matches(&self, candidate: &str) -> bool {
        let (Some(first), Some(last)) = (self.parts.first(), self.parts.last()) else {
            return false;
        };
        let Some(rest) = candidate.strip_prefix(first.as_str()) else {
            return false;
        };
        // The last part is matched at the end, after the first: "ab*b" must not let "ab" pass
        // by reading its `b` twice.
        let Some(mut middle) = rest.strip_suffix(last.as_str()) else {
            return false;
        };
        let inner = self.parts.len().saturating_sub(1);
        for part in self.parts.iter().take(inner).skip(1) {
            match middle.find(part.as_str()) {
                Some(at) => middle = &middle[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(pattern: &str, value: &str) -> bool {
        Wildcard::new(pattern).is_some_and(|w| w.matches(value))
    }

    /// The cases of the peer's wildcard fixture (`wildcard.yaml`), on composite keys.
    #[test]
    fn the_peers_wildcard_cases() {
        assert!(m("wild_foo*", "wild_foo1"));
        assert!(m("wild_foo*", "wild_foo"));
        assert!(!m("wild_foo*", "wild_bar"));
        assert!(m("midWild_bar*b", "midWild_barab"));
        assert!(m("midWild_bar*b", "midWild_bar123b"));
        assert!(m("midWild_bar*b", "midWild_barb"));
        assert!(!m("midWild_bar*b", "midWild_bara"));
        assert!(!m("midWild_bar*b", "midWild_xbarb"));
        assert!(m("multiWild_foo*bar*baz", "multiWild_foo123bar456baz"));
        assert!(m("multiWild_foo*bar*baz", "multiWild_foobarbaz"));
        assert!(!m("multiWild_foo*bar*baz", "multiWild_foo123baz"));
        assert!(!m("multiWild_foo*bar*baz", "multiWild_bar456baz"));
        assert!(m("multiroute_svc*ep*rpc", "multiroute_svceprpc"));
        assert!(!m("multiroute_svc*ep*rpc", "multiroute_svcABCrpc"));
        assert!(m("wild_foo*bar*", "wild_fooXbarY"));
        // Prefix and suffix may not share characters.
        assert!(!m("k_ab*ba", "k_aba"));
        assert!(Wildcard::new("k_exact").is_none());
    }

    /// A regular expression built from the pattern is the reference: the same answer always.
    fn reference(pattern: &str, value: &str) -> bool {
        fn go(p: &[u8], v: &[u8]) -> bool {
            match p.split_first() {
                None => v.is_empty(),
                Some((b'*', rest)) => (0..=v.len()).any(|i| go(rest, &v[i..])),
                Some((c, rest)) => v.first() == Some(c) && go(rest, &v[1..]),
            }
        }
        go(pattern.as_bytes(), value.as_bytes())
    }

    proptest! {
        #[test]
        fn agrees_with_backtracking(pattern in "[ab*]{1,8}", value in "[ab]{0,10}") {
            prop_assume!(pattern.contains('*'));
            prop_assert_eq!(m(&pattern, &value), reference(&pattern, &value));
        }
    }
}
