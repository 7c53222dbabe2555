//! Priority tiers: when the service is full the lowest tier is shed first, and critical traffic
//! only when it alone is more than the service can take.

/// A request's tier, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Shed last (logins, payments, health of the business).
    Critical,
    /// What a request is when nothing says otherwise.
    Default,
    /// May be shed to keep the above (prefetches, retries, non-interactive reads).
    Sheddable,
    /// Shed first (batch jobs, backfills, crawlers).
    Batch,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Critical, Tier::Default, Tier::Sheddable, Tier::Batch];

    pub fn name(self) -> &'static str {
        match self {
            Tier::Critical => "critical",
            Tier::Default => "default",
            Tier::Sheddable => "sheddable",
            Tier::Batch => "batch",
        }
    }

    /// A header's value; an unknown one is `None` (the caller decides: the sidecar uses
    /// `Default`, so a typo never makes a request critical).
    pub fn parse(value: &str) -> Option<Tier> {
        Tier::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(value.trim()))
    }

    /// Higher is served first.
    pub(crate) fn rank(self) -> u8 {
        match self {
            Tier::Critical => 3,
            Tier::Default => 2,
            Tier::Sheddable => 1,
            Tier::Batch => 0,
        }
    }
}
