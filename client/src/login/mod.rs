//! Login protection, as the seed's security review asks: per account (failures only, a hard cap
//! of failures in a row, a growing delay below it instead of a lock), per client network and per
//! (account, network), a global failure signal that puts unknown devices in a stricter tier, and
//! trusted devices that pass with their own budget, so that nobody can lock an owner out by
//! failing on purpose. docs/login.md is the guide.
//!
//! ```no_run
//! # async fn demo(limiter: ratelimit_client::Limiter, ip: std::net::IpAddr) -> Result<(), Box<dyn std::error::Error>> {
//! use ratelimit_client::login::{Attempt, LoginGuard, LoginSettings, Outcome, Secret};
//! let secret = Secret::new(std::fs::read("/run/secrets/login-device-key")?)?;
//! let guard = LoginGuard::new(limiter, LoginSettings::new(secret))?;
//! let attempt = Attempt { account: "alice", ip, device_token: None, challenge_passed: false };
//! let mut decision = guard.before(&attempt).await?;
//! let Some(ticket) = decision.take_ticket() else {
//!     // decision.status(): 429 or 401, Retry-After from decision.retry_after_secs();
//!     // decision.challenge: show a CAPTCHA. Log `decision` (it names no account).
//!     return Ok(());
//! };
//! let password_ok = true; // your password check
//! let outcome = if password_ok { Outcome::Success } else { Outcome::Failure };
//! let after = guard.after(ticket, outcome).await?;
//! // after.device_token: set it as a cookie; after.retry_after_secs(): 401 + Retry-After.
//! # let _ = after; Ok(()) }
//! ```

mod clock;
mod decision;
mod device;
mod dimensions;
mod guard;
mod secret;
mod settings;
mod signal;

pub use clock::UnixClock;
pub use decision::{AfterLogin, Dimension, LoginDecision, Outcome, Ticket, Verdict};
pub use device::{Device, MAX_TOKEN_BYTES};
pub use guard::{Attempt, LoginGuard};
pub use secret::{Secret, MIN_SECRET_BYTES};
pub use settings::{
    InvalidSetting, LoginSettings, MAX_ACCOUNT_BYTES, MAX_KEY_PREFIX_BYTES, MAX_STORE_VALUE,
};
pub use signal::{SignalState, Tier};

/// docs/login.md, whose Rust snippets are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/login.md")]
pub struct LoginGuide;
