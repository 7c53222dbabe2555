//! The table of limiter commands. Tests that must cover every limiter (the cluster suite:
//! routing, resharding, failover, replicas) iterate over `all_limiters()`, so a new command is
//! covered by adding its line here; it fails for an algorithm of the registry without one.

/// Stands for the key in a `Limiter::session` call.
pub const KEY: &str = "<key>";

/// One limiter command, as the cluster tests drive it.
pub struct Limiter {
    /// The command name.
    pub command: &'static str,
    /// The flags `COMMAND GETKEYSANDFLAGS` must give its key (the first argument).
    pub key_flags: &'static [&'static str],
    /// Calls on one key (`KEY` stands for it), run in order at one pinned clock. Each call must
    /// change the key's state (admit, grant, refund…) and reply without error, also when the
    /// whole session is repeated 10 times on the same key; the first call creates the key.
    /// Calls may use other limiter commands on the same key (a refund after a lease).
    pub session: &'static [&'static [&'static str]],
}

pub const LIMITERS: &[Limiter] = &[
    Limiter {
        command: "RL.GCRA",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.GCRA", KEY, "100", "60000"],
            &["RL.GCRA", KEY, "100", "60000", "BURST", "150", "COST", "7"],
        ],
    },
    Limiter {
        command: "RL.TOKENBUCKET",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.TOKENBUCKET", KEY, "100", "60000", "COST", "3"],
            &["RL.TOKENBUCKET", KEY, "90", "30000", "BURST", "120"],
        ],
    },
    Limiter {
        command: "RL.SLIDINGLOG",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.SLIDINGLOG", KEY, "100", "60000"],
            &["RL.SLIDINGLOG", KEY, "100", "60000", "COST", "3"],
        ],
    },
    Limiter {
        command: "RL.SLIDINGCOUNTER",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.SLIDINGCOUNTER", KEY, "100", "60000", "COST", "2"],
            &["RL.SLIDINGCOUNTER", KEY, "100", "60000"],
        ],
    },
    Limiter {
        command: "RL.FIXEDWINDOW",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.FIXEDWINDOW", KEY, "100", "60000"],
            &["RL.FIXEDWINDOW", KEY, "100", "60000", "COST", "4"],
        ],
    },
    Limiter {
        command: "RL.LEASE",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.LEASE", KEY, "100", "60000", "WANT", "4"],
            &["RL.LEASE", KEY, "100", "60000", "BURST", "120", "WANT", "2"],
        ],
    },
    Limiter {
        command: "RL.CONCURRENCY",
        key_flags: &["RW", "access", "update"],
        // At one pinned clock only the anonymous slots of RL.CHARGE make every state of the
        // repeated session new (the failover test finds each round's states in the stream).
        session: &[
            &["RL.CONCURRENCY", KEY, "100", "60000", "ACQUIRE", "a"],
            &["RL.CHARGE", KEY, "1"],
            &["RL.CONCURRENCY", KEY, "100", "60000", "RELEASE", "a"],
        ],
    },
    Limiter {
        command: "RL.SHAPE",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.SHAPE", KEY, "100", "60000", "QUEUE", "200"],
            &[
                "RL.SHAPE", KEY, "100", "60000", "QUEUE", "200", "DELAY", "50", "COST", "3",
            ],
        ],
    },
    Limiter {
        command: "RL.THROTTLE",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.THROTTLE", KEY, "199", "100", "60"],
            &["RL.THROTTLE", KEY, "199", "100", "60", "3"],
        ],
    },
    Limiter {
        command: "RL.REFUND",
        key_flags: &["RW", "access", "update"],
        session: &[
            &["RL.LEASE", KEY, "100", "60000", "WANT", "5"],
            &["RL.REFUND", KEY, "2"],
        ],
    },
    Limiter {
        command: "RL.CHARGE",
        key_flags: &["RW", "access", "update"],
        session: &[
            &[
                "RL.CHARGE",
                KEY,
                "30",
                "POLICY",
                "TOKENBUCKET",
                "100",
                "60000",
            ],
            &["RL.CHARGE", KEY, "5"],
        ],
    },
];

/// `LIMITERS`, once checked to have a row for every algorithm of the registry.
pub fn all_limiters() -> &'static [Limiter] {
    super::assert_covers(
        "support::limiters::LIMITERS",
        super::algorithms(),
        LIMITERS.iter().map(|l| l.command),
    );
    LIMITERS
}

/// A session call with `KEY` replaced by `key`.
pub fn call(words: &[&str], key: &str) -> Vec<String> {
    words
        .iter()
        .map(|w| if *w == KEY { key } else { *w }.to_string())
        .collect()
}

/// The command for a call made by `call`.
pub fn to_cmd(words: &[String]) -> redis::Cmd {
    let mut command = redis::cmd(&words[0]);
    for w in &words[1..] {
        command.arg(w);
    }
    command
}
