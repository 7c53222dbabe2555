//! Reading a command's arguments. Every hostile argument is stopped here with an error that
//! names it; what comes out are values that cannot hold nonsense.

use crate::algo::listed::{limiter_by_word, limiter_list, Listed};
use crate::algo::{Amount, Policy, PolicyError, MAX_LIMIT, MAX_WINDOW_MS};
use crate::error::{echo, Error};
use crate::host::call::{Args, RString};

impl Args<'_> {
    /// The next argument as an integer within `min..=max`, named `name` in the error.
    pub fn next_u64(&mut self, name: &'static str, min: u64, max: u64) -> Result<u64, Error> {
        let bytes = self.next_bytes()?;
        parse_u64(name, bytes, min, max)
    }

    /// Reads the value of option `label` into `slot`: given once, with a value in `min..=max`.
    pub fn option_value(
        &mut self,
        slot: &mut Option<u64>,
        label: &'static str,
        min: u64,
        max: u64,
    ) -> Result<(), Error> {
        if slot.is_some() {
            return Err(Error::RepeatedOption(label));
        }
        if self.remaining() == 0 {
            return Err(Error::MissingValue(label));
        }
        *slot = Some(self.next_u64(label, min, max)?);
        Ok(())
    }

    /// Fails if anything is left unread.
    pub fn done(&self) -> Result<(), Error> {
        if self.remaining() > 0 {
            return Err(Error::Syntax("too many arguments".into()));
        }
        Ok(())
    }
}

/// The registry's limiter named `word` (any case), as `RL.CHARGE`'s `POLICY` and `RL.SHARE` name
/// one; else the error listing the words they take.
pub fn limiter_rule(word: &[u8]) -> Result<&'static Listed, Error> {
    limiter_by_word(word).ok_or_else(|| {
        Error::Syntax(format!(
            "unknown algorithm '{}'; expected one of {}",
            echo(word),
            limiter_list(|l| l.word, |_| true, ", ")
        ))
    })
}

/// The policy L per W ms with `capacity`, each already range-checked: the one refusal left is a
/// capacity that takes too long to refill.
pub fn policy(limit: u64, window_ms: u64, capacity: u64) -> Result<Policy, Error> {
    Policy::new(limit, window_ms, capacity).map_err(|e| match e {
        PolicyError::RefillTooSlow => Error::RefillTooSlow {
            capacity,
            limit,
            window_ms,
        },
        // Each field was range-checked by the caller.
        PolicyError::Limit | PolicyError::Window | PolicyError::Capacity => Error::Internal,
    })
}

/// A decimal integer in `min..=max`: digits only (no sign, spaces or exponent).
pub fn parse_u64(name: &'static str, bytes: &[u8], min: u64, max: u64) -> Result<u64, Error> {
    let invalid = || Error::InvalidInteger {
        name,
        value: echo(bytes),
        min,
        max,
    };
    if bytes.is_empty() || bytes.len() > 20 {
        return Err(invalid());
    }
    // One pass; up to 19 digits cannot overflow (10^19 - 1 < 2^64), so only a 20th digit is
    // checked. Every command parses two or three of these: this is on every admit's path.
    let (head, last) = bytes.split_at(bytes.len().min(19));
    let mut n = 0u64;
    for &b in head {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return Err(invalid());
        }
        n = n * 10 + u64::from(digit);
    }
    if let Some(&b) = last.first() {
        let digit = b.wrapping_sub(b'0');
        n = match n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(digit)))
        {
            Some(n) if digit <= 9 => n,
            _ => return Err(invalid()),
        };
    }
    if !(min..=max).contains(&n) {
        return Err(invalid());
    }
    Ok(n)
}

/// A signed decimal integer in `-max..=max`.
pub fn parse_i64(name: &'static str, bytes: &[u8], max: u64) -> Result<i64, Error> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let magnitude = parse_u64(name, digits, 0, max).map_err(|_| {
        Error::Syntax(format!(
            "invalid {name} '{}': expected an integer from -{max} to {max}",
            echo(bytes)
        ))
    })?;
    let magnitude = i64::try_from(magnitude).map_err(|_| Error::Internal)?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// Which options a limiter command accepts after `key L W`.
#[derive(Clone, Copy)]
pub struct Options {
    pub burst: bool,
    /// `COST n` (cost 0 peeks) or, for leases, `WANT n` (required).
    pub ask: Ask,
}

/// The option a limiter command's amount is given by.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `COST n` (default 1, 0 peeks): [`Amount::Cost`] or [`Amount::Peek`].
    Cost,
    /// `WANT n` (required, at least 1): [`Amount::Lease`].
    Want,
}

/// A parsed limiter request: `key L W [BURST B] [COST n]`.
pub struct Request<'a> {
    pub key: RString<'a>,
    pub policy: Policy,
    /// What it asks: COST (default 1, 0 peeks) or WANT.
    pub amount: Amount,
}

/// Parses `key L W` and the options. BURST defaults to L; for the window algorithms (no BURST
/// option) the capacity is L.
pub fn parse_request<'a>(mut args: Args<'a>, options: Options) -> Result<Request<'a>, Error> {
    if args.remaining() < 3 {
        return Err(Error::WrongArity);
    }
    let key = args.next_string()?;
    parse_limiter(key, &mut args, options, |_| false)
}

/// Parses `L W` and the options of one limiter for `key`; `stop` tells where its options end
/// (the next limiter of `RL.ALL`), else they run to the end of the arguments.
pub fn parse_limiter<'a>(
    key: RString<'a>,
    args: &mut Args<'a>,
    options: Options,
    stop: impl Fn(&[u8]) -> bool,
) -> Result<Request<'a>, Error> {
    let limit = args.next_u64("L", 1, MAX_LIMIT)?;
    let window_ms = args.next_u64("W", 1, MAX_WINDOW_MS)?;
    let (mut burst, mut amount) = (None, None);
    let amount_name = match options.ask {
        Ask::Cost => "COST",
        Ask::Want => "WANT",
    };
    while let Some(name) = args.peek_bytes().filter(|n| !stop(n)) {
        args.next_bytes()?;
        let (slot, label, min) = if options.burst && name.eq_ignore_ascii_case(b"BURST") {
            (&mut burst, "BURST", 1)
        } else if name.eq_ignore_ascii_case(amount_name.as_bytes()) {
            (
                &mut amount,
                amount_name,
                u64::from(options.ask == Ask::Want),
            )
        } else {
            let known = if options.burst {
                format!("BURST or {amount_name}")
            } else {
                amount_name.to_string()
            };
            return Err(Error::Syntax(format!(
                "unknown option '{}'; expected {known}",
                echo(name)
            )));
        };
        args.option_value(slot, label, min, MAX_LIMIT)?;
    }
    let capacity = burst.unwrap_or(limit);
    let policy = policy(limit, window_ms, capacity)?;
    let amount = match (options.ask, amount) {
        (Ask::Want, Some(n)) => Amount::Lease(n),
        (Ask::Want, None) => return Err(Error::Syntax("WANT n is required".into())),
        (Ask::Cost, n) => {
            let cost = n.unwrap_or(1);
            if cost > capacity {
                return Err(Error::CostExceedsCapacity { cost, capacity });
            }
            Amount::cost(cost)
        }
    };
    Ok(Request {
        key,
        policy,
        amount,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_u64("L", b"10", 1, 100), Ok(10));
        assert_eq!(parse_u64("L", b"007", 1, 100), Ok(7));
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b" 1",
            b"1.5",
            b"1e3",
            b"0",
            b"101",
            b"18446744073709551616",
            b"99999999999999999999999",
        ] {
            assert!(parse_u64("L", bad, 1, 100).is_err(), "{bad:?}");
        }
        assert_eq!(parse_i64("ms", b"-5", 10), Ok(-5));
        assert!(parse_i64("ms", b"--5", 10).is_err());
        assert_eq!(
            parse_u64("n", b"18446744073709551615", 0, u64::MAX),
            Ok(u64::MAX)
        );
        assert!(parse_u64("n", b"1844674407370955161/", 0, u64::MAX).is_err());
    }

    proptest::proptest! {
        /// The one-pass parser answers as the standard one on digits (of any length up to 21,
        /// leading zeros included) and refuses anything else, a sign included.
        #[test]
        fn integers_parse_as_the_standard_parser(text in "[0-9]{1,21}|[-+ 0-9a/:]{0,21}") {
            let expected = if text.bytes().all(|b| b.is_ascii_digit()) && text.len() <= 20 {
                text.parse::<u64>().ok()
            } else {
                None
            };
            proptest::prop_assert_eq!(parse_u64("n", text.as_bytes(), 0, u64::MAX).ok(), expected);
        }
    }
}
