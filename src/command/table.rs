//! The command table: every command with its flags, arity, keys, ACL categories, keyspace event
//! and handler; each algorithm's own command comes from the registry (`algo::registry!`).

use std::ffi::{c_int, CStr};

use redis_module::commands::{BeginSearch, FindKeys, KeySpec, KeySpecFlags};

use super::reply::Reply;
use super::{
    all, charge, concurrency, debug, demand, inspect, limit, peek, refund, setstate, shape, share,
    throttle,
};
use crate::error::Error;
use crate::host::call::{Args, Ctx};

/// Which arguments are keys, and how the command uses them: for key specs, `COMMAND GETKEYS`,
/// ACL key patterns and cluster routing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    None,
    /// The first argument: read, updated, and data from it returned.
    ReadWrite,
    /// The first argument, only read.
    ReadOnly,
    /// The first argument, replaced.
    Overwrite,
    /// The first argument, read and changed, nothing of it returned (`RL.SETSTATE`, whose DELTA
    /// form changes the state the key holds).
    Update,
    /// `numkeys key [key ...]`: read and updated, like `ReadWrite`.
    NumKeys,
    /// Every argument, each read and updated (`RL.DEMAND`).
    Every,
    /// Every third argument from the fifth, each read and updated (`RL.SHARE`).
    Triples,
}

impl Keys {
    /// (first, last, step) for `RedisModule_CreateCommand`; a numkeys command has none (its key
    /// spec makes Redis mark it movablekeys).
    pub fn legacy_range(self) -> (c_int, c_int, c_int) {
        match self {
            Keys::None | Keys::NumKeys => (0, 0, 0),
            Keys::ReadWrite | Keys::ReadOnly | Keys::Overwrite | Keys::Update => (1, 1, 1),
            Keys::Every => (1, -1, 1),
            Keys::Triples => (share::FIRST_KEY as c_int, -1, 3),
        }
    }

    /// Command flags the key layout needs: a numkeys command also answers Redis's keys-position
    /// requests (`getkeys-api`), because Redis 7.0's cluster redirection (and so CROSSSLOT and
    /// MOVED) ignores key specs: without it, `RL.ALL` would run on whichever node received it.
    pub fn extra_flags(self) -> &'static str {
        match self {
            Keys::NumKeys => " getkeys-api",
            Keys::None
            | Keys::ReadWrite
            | Keys::ReadOnly
            | Keys::Overwrite
            | Keys::Update
            | Keys::Every
            | Keys::Triples => "",
        }
    }

    pub fn key_spec(self) -> Option<KeySpec> {
        let read_write = KeySpecFlags::READ_WRITE | KeySpecFlags::UPDATE | KeySpecFlags::ACCESS;
        let first = |flags| {
            KeySpec::new(
                None,
                flags,
                BeginSearch::new_index(1),
                FindKeys::new_range(0, 1, 0),
            )
        };
        match self {
            Keys::None => None,
            Keys::ReadWrite => Some(first(read_write)),
            Keys::ReadOnly => Some(first(KeySpecFlags::READ_ONLY | KeySpecFlags::ACCESS)),
            Keys::Overwrite => Some(first(KeySpecFlags::OVERWRITE | KeySpecFlags::UPDATE)),
            Keys::Update => Some(first(KeySpecFlags::READ_WRITE | KeySpecFlags::UPDATE)),
            Keys::NumKeys => Some(KeySpec::new(
                None,
                read_write,
                BeginSearch::new_index(1),
                FindKeys::new_keys_num(0, 1, 1),
            )),
            Keys::Every => Some(KeySpec::new(
                None,
                read_write,
                BeginSearch::new_index(1),
                FindKeys::new_range(-1, 1, 0),
            )),
            Keys::Triples => Some(KeySpec::new(
                None,
                read_write,
                BeginSearch::new_index(share::FIRST_KEY as i32),
                FindKeys::new_range(-1, 3, 0),
            )),
        }
    }
}

/// A command's handler: parses its arguments, does its work, and says what to answer.
pub type Handler = fn(&Ctx, Args<'_>) -> Result<Reply, Error>;

/// One row of the command table.
pub struct Spec {
    pub name: &'static str,
    /// Redis command flags, e.g. `write deny-oom fast`. A `write` command never runs on a
    /// replica except from its master's stream or a load.
    pub flags: &'static str,
    /// Redis arity: positive exact, negative minimum (command name included).
    pub arity: i32,
    pub keys: Keys,
    pub summary: &'static str,
    /// The keyspace event sent when it changes a key: the name in lower case.
    pub event: &'static CStr,
    /// ACL categories, where the server has them (Redis 7.2+, Valkey): built-in ones plus
    /// `ratelimit`, the module's own, which is left out where the server cannot add categories
    /// (7.2). See `server_facts::acl_categories`. A gateway command is `GATEWAY` (or `GATEWAY_READ`
    /// if it only reads); an operator-only one is in `dangerous` and never in `ratelimit`.
    pub acl: &'static str,
    pub handler: Handler,
    /// Where the keys are, for a command whose keys Redis cannot find from a fixed range (a
    /// numkeys command answers Redis's keys-position requests: see `Keys::NumKeys`).
    pub key_positions: Option<fn(Args<'_>) -> std::ops::Range<usize>>,
    /// Registered only when this says so (`CL.THROTTLE`, with `CELL-COMPAT yes`).
    pub condition: Option<Condition>,
}

/// When a row of the table is registered, and how a failure to register it is explained.
pub struct Condition {
    pub registered: fn() -> bool,
    pub explain: fn(String) -> String,
}

const WRITE: &str = "write deny-oom fast";
/// What a gateway calls: granted by `+@ratelimit`.
const GATEWAY: &str = "write fast ratelimit";
/// What a gateway or a dashboard calls to look without changing anything.
const GATEWAY_READ: &str = "read fast ratelimit";

/// The row of an algorithm's own command (see `algo::registry!`): `limiter`, the five-integer
/// `RL.<WORD> key L W [BURST B] [COST n]`; `shaper`, `RL.SHAPE` with its queue and delay;
/// `concurrency`, `RL.CONCURRENCY key N TTL ACQUIRE id | RENEW id | RELEASE id | PEEK`.
macro_rules! algorithm_row {
    (limiter, $state:ty, $word:literal, $event:literal, $summary:literal) => {
        Spec {
            name: concat!("RL.", $word),
            flags: WRITE,
            arity: -4,
            keys: Keys::ReadWrite,
            summary: $summary,
            event: $event,
            acl: GATEWAY,
            handler: limit::request::<$state>,
            key_positions: None,
            condition: None,
        }
    };
    (shaper, $state:ty, $word:literal, $event:literal, $summary:literal) => {
        Spec {
            name: concat!("RL.", $word),
            flags: WRITE,
            arity: -4,
            keys: Keys::ReadWrite,
            summary: $summary,
            event: $event,
            acl: GATEWAY,
            handler: shape::shape,
            key_positions: None,
            condition: None,
        }
    };
    (concurrency, $state:ty, $word:literal, $event:literal, $summary:literal) => {
        Spec {
            name: concat!("RL.", $word),
            flags: WRITE,
            arity: -5,
            keys: Keys::ReadWrite,
            summary: $summary,
            event: $event,
            acl: GATEWAY,
            handler: concurrency::concurrency,
            key_positions: None,
            condition: None,
        }
    };
}

/// The command table: every algorithm's own command (from the registry), then the rest.
macro_rules! command_table {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        /// Every command of the module.
        pub const COMMANDS: &[Spec] = &[
            $(algorithm_row!($kind, crate::algo::$module::$variant, $word, $event, $summary),)*
    Spec {
        name: "RL.LEASE",
        flags: WRITE,
        arity: -6,
        keys: Keys::ReadWrite,
        summary: "Takes up to n tokens at once from a token bucket, for a gateway to spend locally",
        event: c"rl.lease",
        acl: GATEWAY,
        handler: limit::lease,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.REFUND",
        flags: WRITE,
        arity: 3,
        keys: Keys::ReadWrite,
        summary: "Gives back n unspent tokens to the limiter at key, never above its capacity",
        event: c"rl.refund",
        acl: GATEWAY,
        handler: refund::refund,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.CHARGE",
        flags: WRITE,
        arity: -3,
        keys: Keys::ReadWrite,
        summary: "Charges n tokens to the limiter at key whatever it holds (a response's overage): the key goes into debt",
        event: c"rl.charge",
        acl: GATEWAY,
        handler: charge::charge,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.ALL",
        flags: WRITE,
        arity: -6,
        keys: Keys::NumKeys,
        summary: "Decides one request over several limiters at once: admitted only if all admit, then all charged",
        event: c"rl.all",
        acl: GATEWAY,
        handler: all::all,
        key_positions: Some(all::key_positions),
        condition: None,
    },
    Spec {
        name: "RL.SETTLE",
        flags: WRITE,
        arity: -8,
        keys: Keys::NumKeys,
        summary: "Settles a served request over several limiters at once, each by its own difference: a charge into debt or a refund",
        event: c"rl.settle",
        acl: GATEWAY,
        handler: all::settle,
        key_positions: Some(all::key_positions),
        condition: None,
    },
    Spec {
        name: "RL.THROTTLE",
        flags: WRITE,
        arity: -5,
        keys: Keys::ReadWrite,
        summary: "redis-cell's CL.THROTTLE (same arguments and reply), decided by RL.GCRA",
        event: c"rl.throttle",
        acl: GATEWAY,
        handler: throttle::throttle,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: throttle::CL_THROTTLE,
        flags: WRITE,
        arity: -5,
        keys: Keys::ReadWrite,
        summary: "RL.THROTTLE under redis-cell's name (loaded with CELL-COMPAT yes)",
        event: c"cl.throttle",
        acl: GATEWAY,
        handler: throttle::throttle,
        key_positions: None,
        condition: Some(Condition {
            registered: throttle::cell_compat,
            explain: throttle::explain,
        }),
    },
    Spec {
        name: "RL.PEEK",
        flags: "readonly fast",
        arity: 2,
        keys: Keys::ReadOnly,
        summary: "Answers what a cost-1 request would get now under the key's stored policy, spending nothing",
        event: c"rl.peek",
        acl: GATEWAY_READ,
        handler: peek::peek,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.INSPECT",
        flags: "readonly",
        arity: 2,
        keys: Keys::ReadOnly,
        summary: "Explains the limiter at key: its policy and state in human units",
        event: c"rl.inspect",
        acl: GATEWAY_READ,
        handler: inspect::inspect,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.SETSTATE",
        flags: "write deny-oom",
        arity: -3,
        // The DELTA form reads the state it changes.
        keys: Keys::Update,
        summary: "Internal: stores a limiter state, or applies a sliding log's delta (replication and AOF effects)",
        event: c"rl.setstate",
        acl: "write slow dangerous",
        handler: setstate::set_state,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.SHARE",
        flags: "write deny-oom",
        arity: -8,
        keys: Keys::Triples,
        summary: "Budget controller: stores each key's share of a global limit in this region, with its expiry",
        event: c"rl.share",
        acl: "write slow dangerous",
        handler: share::share,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.DEMAND",
        flags: "write fast",
        arity: -2,
        keys: Keys::Every,
        summary: "Budget controller: per key, asked and admitted since the last read (then reset), and the share held",
        event: c"rl.demand",
        acl: "write fast dangerous",
        handler: demand::demand,
        key_positions: None,
        condition: None,
    },
    Spec {
        name: "RL.DEBUG",
        flags: "admin fast",
        arity: -2,
        keys: Keys::None,
        summary: "Test support: pins or moves the module's clock (needs DEBUG-CLOCK yes)",
        event: c"rl.debug",
        acl: "admin dangerous fast",
        handler: debug::debug,
        key_positions: None,
        condition: None,
    },
        ];
    };
}

crate::algo::registry!(command_table);

#[cfg(test)]
mod tests {
    use super::super::throttle::CL_THROTTLE;
    use super::{Spec, COMMANDS};
    use crate::server_facts::ACL_CATEGORY;

    #[test]
    fn every_command_is_either_for_gateways_or_dangerous() {
        for spec in COMMANDS {
            let words: Vec<&str> = spec.acl.split_whitespace().collect();
            let dangerous = words.contains(&"dangerous");
            assert_ne!(dangerous, words.contains(&ACL_CATEGORY), "{}", spec.name);
            let operator_only =
                ["RL.SETSTATE", "RL.DEBUG", "RL.SHARE", "RL.DEMAND"].contains(&spec.name);
            assert_eq!(dangerous, operator_only, "{}", spec.name);
            assert!(
                words.contains(&"fast") || words.contains(&"slow"),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn cl_throttle_is_registered_only_in_compat_mode() {
        let row = |name: &str| COMMANDS.iter().find(|s| s.name == name).unwrap();
        let (cl, rl) = (row(CL_THROTTLE), row("RL.THROTTLE"));
        let registered = |spec: &Spec| {
            spec.condition
                .as_ref()
                .is_none_or(|condition| (condition.registered)())
        };
        assert!(!registered(cl) && registered(rl));
        // A failed registration of CL.THROTTLE says why; any other is left as it is.
        let explain = cl.condition.as_ref().map(|c| c.explain).unwrap();
        assert!(explain("cannot register CL.THROTTLE".into()).contains("another module"));
        assert!(rl.condition.is_none());
    }
}
