//! What the guard answers: before the password check, whether to check it (and if not, which
//! dimension decided, why, and what to answer); after it, what to answer and the device token.

use std::fmt;

use http::StatusCode;

use crate::command::Source;

use super::device::Device;
use super::signal::Tier;

/// Before the password check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Check the password, then call `after` with the ticket.
    Proceed,
    /// Too many failures in a row on this account: not checked; answer 401 with `Retry-After`
    /// ("retry in N ms"). The delay grows with each failure and drains with time.
    Delay,
    /// A hard limit is reached: not checked; answer 429 with `Retry-After`.
    Deny,
    /// The global signal is tripped and this device is unknown: show a challenge (a CAPTCHA)
    /// and ask again with `challenge_passed` once it is solved; not checked until then.
    Challenge,
}

/// Which dimension decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// Nothing limited the attempt.
    None,
    /// The account's failures from unknown devices (the cap, or the growing delay).
    Account,
    /// The account's failures from this network.
    Pair,
    /// This network's failures, over all accounts.
    Prefix,
    /// The failure rate over all accounts.
    Global,
    /// The account's trusted devices' own budget.
    TrustedDevice,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Proceed => "proceed",
            Verdict::Delay => "delay",
            Verdict::Deny => "deny",
            Verdict::Challenge => "challenge",
        }
    }
}

impl Dimension {
    pub fn name(self) -> &'static str {
        match self {
            Dimension::None => "none",
            Dimension::Account => "account",
            Dimension::Pair => "account_network",
            Dimension::Prefix => "network",
            Dimension::Global => "global",
            Dimension::TrustedDevice => "trusted_device",
        }
    }
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Unknown => "unknown",
            Device::Trusted => "trusted",
            Device::Refused => "refused",
        }
    }
}

/// What `after` needs to know of an attempt that proceeded. Its `Debug` names no account.
pub struct Ticket {
    pub(super) account: String,
    pub(super) tag: String,
    /// The client's network key; `None` for a trusted device (not counted per network).
    pub(super) prefix: Option<String>,
    pub(super) tier: Tier,
    /// The account's failures counted with this attempt's: the k of a failure in a row.
    pub(super) failures: u64,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("trusted", &self.prefix.is_none())
            .field("tier", &self.tier)
            .finish_non_exhaustive()
    }
}

/// The guard's answer before the password check. Its `Display` is a log line without the
/// account, the address or any token.
#[derive(Debug)]
pub struct LoginDecision {
    pub verdict: Verdict,
    pub dimension: Dimension,
    /// Why, in words, for logs.
    pub reason: &'static str,
    pub tier: Tier,
    pub device: Device,
    /// Show a challenge (`Verdict::Challenge`).
    pub challenge: bool,
    /// `None` to proceed (or for a challenge); else ms until an attempt may be checked.
    pub retry_after_ms: Option<u64>,
    /// `Store`, or `Fallback(Security)` when a limit decided without the store.
    pub source: Source,
    pub(super) ticket: Option<Ticket>,
}

impl LoginDecision {
    /// Check the password.
    pub fn proceed(&self) -> bool {
        self.verdict == Verdict::Proceed
    }

    /// The ticket to hand to `after` (once), when the attempt proceeds.
    pub fn take_ticket(&mut self) -> Option<Ticket> {
        self.ticket.take()
    }

    /// The response when the password is not checked: 429 for a denial, 401 for a delay or a
    /// challenge; `None` to proceed.
    pub fn status(&self) -> Option<StatusCode> {
        match self.verdict {
            Verdict::Proceed => None,
            Verdict::Deny => Some(StatusCode::TOO_MANY_REQUESTS),
            Verdict::Delay | Verdict::Challenge => Some(StatusCode::UNAUTHORIZED),
        }
    }

    /// `Retry-After` in whole seconds, rounded up.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000))
    }
}

impl fmt::Display for LoginDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "login verdict={} dimension={} tier={} device={} challenge={} retry_after_ms={} source={} reason=\"{}\"",
            self.verdict.name(),
            self.dimension.name(),
            self.tier.name(),
            self.device.name(),
            self.challenge,
            self.retry_after_ms.map_or("-".to_string(), |ms| ms.to_string()),
            self.source.name(),
            self.reason
        )
    }
}

/// How the password check went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// The guard's answer after the password check.
#[derive(Debug)]
pub struct AfterLogin {
    pub outcome: Outcome,
    /// On a success: a token for this device, to set as a long-lived cookie; it makes the next
    /// logins from it trusted (a trusted device gets a fresh one, with a new expiry).
    pub device_token: Option<String>,
    /// On a failure from an unknown device: ms until its next attempt is checked (the delay the
    /// failure added), for `401` + `Retry-After`; `None`: at once.
    pub retry_after_ms: Option<u64>,
    pub tier: Tier,
}

impl AfterLogin {
    /// 200 on a success, 401 on a failure.
    pub fn status(&self) -> StatusCode {
        match self.outcome {
            Outcome::Success => StatusCode::OK,
            Outcome::Failure => StatusCode::UNAUTHORIZED,
        }
    }

    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_verdict_has_its_response_and_the_log_line_names_no_account() {
        let mut d = LoginDecision {
            verdict: Verdict::Deny,
            dimension: Dimension::Prefix,
            reason: "r",
            tier: Tier::Strict,
            device: Device::Unknown,
            challenge: false,
            retry_after_ms: Some(1_001),
            source: Source::Store,
            ticket: Some(Ticket {
                account: "alice".into(),
                tag: "t".into(),
                prefix: Some("203.0.113.0/24".into()),
                tier: Tier::Strict,
                failures: 1,
            }),
        };
        assert_eq!(d.status(), Some(StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(d.retry_after_secs(), Some(2));
        let line = format!("{d} {d:?}");
        assert!(
            !line.contains("alice") && !line.contains("203.0.113"),
            "{line}"
        );
        assert!(
            line.contains("verdict=deny dimension=network tier=strict"),
            "{line}"
        );
        assert!(d.take_ticket().is_some() && d.take_ticket().is_none());
        d.verdict = Verdict::Delay;
        assert_eq!(d.status(), Some(StatusCode::UNAUTHORIZED));
        d.verdict = Verdict::Proceed;
        assert_eq!(d.status(), None);
    }
}
