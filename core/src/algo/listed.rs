//! The registry as data, for what cannot take the macro (`INFO`'s ids, the packages that link
//! the core): generated from `algo::registry!`, so it lists every algorithm, once.

use super::algorithm::Algorithm;

macro_rules! algorithm_ids {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        /// Every algorithm as (stored tag, how INFO and RL.INSPECT name it), in registry order.
        pub const ALGORITHM_IDS: &[(u8, &str)] =
            &[$((<super::$module::$variant as Algorithm>::TAG, <super::$module::$variant as Algorithm>::ID)),*];
    };
}
crate::registry!(algorithm_ids);

/// One algorithm of the registry, as the packages that link the core see it (the gateway
/// client's `Algorithm` and the integration tests are checked against [`REGISTRY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The word that names it in commands: `RL.<WORD>`, and inside `RL.ALL` for a limiter.
    pub word: &'static str,
    /// How `INFO ratelimit` and `RL.INSPECT` name it ([`Algorithm::ID`]).
    pub id: &'static str,
    /// How errors name it ([`Algorithm::NAME`]).
    pub name: &'static str,
    /// Its tag in the stored encoding ([`Algorithm::TAG`]).
    pub tag: u8,
    /// Whether it takes `BURST` ([`Algorithm::BURST`]).
    pub burst: bool,
    /// A limiter: the five-integer reply, offered inside `RL.ALL`. Else a shaper (`RL.SHAPE`)
    /// or the concurrency limiter (`RL.CONCURRENCY`).
    pub limiter: bool,
    /// Its kind in the registry: "limiter", "shaper" or "concurrency".
    pub kind: &'static str,
}

macro_rules! listed {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        /// Every algorithm of the registry, in its order.
        pub const REGISTRY: &[Listed] = &[$(Listed {
            word: $word,
            id: <super::$module::$variant as Algorithm>::ID,
            name: <super::$module::$variant as Algorithm>::NAME,
            tag: <super::$module::$variant as Algorithm>::TAG,
            burst: <super::$module::$variant as Algorithm>::BURST,
            limiter: matches!(stringify!($kind).as_bytes(), b"limiter"),
            kind: stringify!($kind),
        }),*];
    };
}
crate::registry!(listed);

/// The registry's limiters (the algorithms offered inside `RL.ALL`, with the five-integer
/// reply), in its order: what a gateway, the RLS's YAML or the regions controller may name.
pub fn limiters() -> impl Iterator<Item = &'static Listed> {
    REGISTRY.iter().filter(|l| l.limiter)
}

/// The limiter a command word names, in any case (`GCRA`, `tokenbucket`): the word inside
/// `RL.ALL`, `RL.SETTLE`, `RL.CHARGE`'s `POLICY` and `RL.SHARE`, and the regions controller's
/// configuration word.
pub fn limiter_by_word(word: impl AsRef<[u8]>) -> Option<&'static Listed> {
    let word = word.as_ref();
    limiters().find(|l| l.word.as_bytes().eq_ignore_ascii_case(word))
}

/// The limiter an id names, exactly (`token_bucket`): the RLS's YAML `algorithm` word.
pub fn limiter_by_id(id: &str) -> Option<&'static Listed> {
    limiters().find(|l| l.id == id)
}

/// `what` of the limiters that match `keep`, joined with `separator`, for error texts that
/// list the accepted words ("gcra, token_bucket, …").
pub fn limiter_list(
    what: fn(&Listed) -> &'static str,
    keep: fn(&Listed) -> bool,
    separator: &str,
) -> String {
    limiters()
        .filter(|l| keep(l))
        .map(what)
        .collect::<Vec<_>>()
        .join(separator)
}

/// The registry as text, one algorithm a line, tab-separated: word, id, name, tag, `burst` or
/// `-`, `limiter` or `shaper`. What the tools outside Rust read (`core/examples/registry.rs`
/// prints it; `scripts/benchkit/registry.py` parses it).
pub fn tsv() -> String {
    REGISTRY
        .iter()
        .map(|l| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                l.word,
                l.id,
                l.name,
                l.tag,
                if l.burst { "burst" } else { "-" },
                if l.limiter { "limiter" } else { "shaper" }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiters_are_found_by_word_and_id() {
        assert_eq!(
            limiter_by_word("tokenbucket").map(|l| l.id),
            Some("token_bucket")
        );
        assert_eq!(
            limiter_by_id("token_bucket").map(|l| l.word),
            Some("TOKENBUCKET")
        );
        assert_eq!(limiter_by_id("TOKENBUCKET"), None);
        assert_eq!(limiter_by_word("SHAPE"), None, "a shaper is no limiter");
        assert_eq!(
            limiter_list(|l| l.id, |l| l.burst, " and "),
            "gcra and token_bucket"
        );
    }
}
