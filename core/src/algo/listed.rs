//! The registry as data, for what cannot take the macro (`INFO`'s ids, the packages that link
//! the core): generated from `algo::registry!`, so it lists every algorithm, once.

use super::Algorithm;

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
