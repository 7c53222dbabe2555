//! Pure rate-limiting algorithms: numbers in, a decision and the next state out.
//!
//! Nothing here knows about Redis. Time is an argument (`now_ns`, nanoseconds since the Unix
//! epoch), so tests drive it by hand.
//!
//! This file is the registry (`registry!`: every algorithm, once) and the list of the
//! algorithm's parts; the types every algorithm shares live in `policy`, `decision`,
//! `algorithm` and `inspect`, and an algorithm file names those files, never this one.

pub mod algorithm;
pub mod amount;
pub mod bytes;
pub mod concurrency;
pub mod decision;
pub mod fixed_window;
pub mod gcra;
pub mod inspect;
pub mod listed;
pub mod policy;
pub mod settle;
pub mod shape;
pub mod sliding_counter;
pub mod sliding_log;
pub mod step;
pub mod token_bucket;

pub use algorithm::Algorithm;
pub use amount::Amount;
pub use decision::{Decided, Decision, Outcome};
pub use inspect::{inspection, millitokens, relative_ms, Field};
pub use policy::{
    ms_ceil, ms_to_ns, rescale_units, Policy, PolicyError, MAX_LIMIT, MAX_REFILL_MS, MAX_WINDOW_MS,
};

/// The registry: every algorithm, once. Adding an algorithm is its pure file (with its
/// `algorithm!` line: error name, INFO id, stored tag, whether it takes BURST) and one line here:
/// its module, its state type, the word that names it in commands (`RL.<WORD>`, and inside
/// `RL.ALL`), its keyspace event, how its command answers (`limiter`: the five integers of
/// `limit::request`, also offered inside `RL.ALL`; `shaper`: `RL.SHAPE`'s own handler;
/// `concurrency`: `RL.CONCURRENCY`'s holders, its own handler), and its
/// command's summary. The stored enum, its dispatch and encoding, the INFO ids, the command
/// table and `RL.ALL`'s table are generated from it (`registry!(some_macro)` hands the list to
/// `some_macro`); tags are never reused.
#[macro_export]
macro_rules! registry {
    ($then:ident) => {
        $then! {
            gcra::Gcra, "GCRA", c"rl.gcra", limiter,
                "Decides one request with GCRA: at most L per W ms plus a burst of B";
            token_bucket::TokenBucket, "TOKENBUCKET", c"rl.tokenbucket", limiter,
                "Decides one request with a token bucket: at most L per W ms plus a burst of B";
            sliding_log::SlidingLog, "SLIDINGLOG", c"rl.slidinglog", limiter,
                "Decides one request with a sliding log: never more than L in any W ms";
            sliding_counter::SlidingCounter, "SLIDINGCOUNTER", c"rl.slidingcounter", limiter,
                "Decides one request with a sliding window counter (two weighted windows)";
            fixed_window::FixedWindow, "FIXEDWINDOW", c"rl.fixedwindow", limiter,
                "Decides one request with a fixed window counter: at most L per aligned W ms";
            shape::Shape, "SHAPE", c"rl.shape", shaper,
                "Shapes with a leaky bucket queue (nginx limit_req): admits with the delay to wait, or denies";
            concurrency::Concurrency, "CONCURRENCY", c"rl.concurrency", concurrency,
                "Bounds requests in flight: at most N holders at once, each expiring TTL ms after its last ACQUIRE or RENEW";
        }
    };
}
pub use crate::registry;

/// Each algorithm's promise and the property tests of every algorithm of the registry, and the
/// property-test helpers (the state module and the packages that link the core reuse them).
#[cfg(any(test, feature = "props"))]
pub mod promises;
#[cfg(any(test, feature = "props"))]
pub mod props;
