//! The Functions library (functions/ratelimit.lua) as this client carries it: its source, its
//! version, and what the client does with a server's: load it when absent, replace an older one
//! when told to, refuse an incompatible one ([`LoadLibrary`], docs/functions.md, versions).

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The library's source, as `FUNCTION LOAD` takes it; the scripts backend's scripts are
/// generated from it too (crate::scripts).
pub const LIBRARY_SOURCE: &str = include_str!("../../functions/ratelimit.lua");

/// The command that loads this client's library by hand, as the refusals name it.
pub const LOAD_COMMAND: &str = "redis-cli -x FUNCTION LOAD REPLACE < functions/ratelimit.lua";

/// A library version, MAJOR.MINOR (`FCALL rl_version 0`). A MINOR adds functions or options and
/// keeps every reply and stored format; a MAJOR changes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    /// The version `LIBRARY_VERSION` declares in the carried source.
    pub fn carried() -> Version {
        LIBRARY_SOURCE
            .lines()
            .find_map(|l| l.strip_prefix("local LIBRARY_VERSION = '"))
            .and_then(|v| v.strip_suffix('\''))
            .and_then(|v| v.parse().ok())
            // The source is this crate's own file: tests/library.rs holds it to a version.
            .unwrap_or(Version { major: 0, minor: 0 })
    }
}

impl FromStr for Version {
    type Err = ();
    fn from_str(s: &str) -> Result<Version, ()> {
        let (major, minor) = s.split_once('.').ok_or(())?;
        Ok(Version {
            major: major.parse().map_err(|_| ())?,
            minor: minor.parse().map_err(|_| ())?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What the client may do to a server's library at connect (and to a Cluster node found
/// without it later). Loading a library is an operator's act: [`LoadLibrary::No`] by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LoadLibrary {
    /// Never load: a server without the library is served through the scripts backend, one
    /// with an older or incompatible library is refused.
    #[default]
    No,
    /// `FUNCTION LOAD` where the library is absent (every master of a Cluster).
    Missing,
    /// As `Missing`, and `FUNCTION LOAD REPLACE` over an older library.
    Replace,
}

impl FromStr for LoadLibrary {
    type Err = String;
    /// `no`, `missing` or `replace` (REDIS_LOAD_LIBRARY); anything else is refused by name.
    fn from_str(s: &str) -> Result<LoadLibrary, String> {
        match s {
            "no" => Ok(LoadLibrary::No),
            "missing" => Ok(LoadLibrary::Missing),
            "replace" => Ok(LoadLibrary::Replace),
            other => Err(format!(
                "REDIS_LOAD_LIBRARY '{other}': expected no, missing or replace"
            )),
        }
    }
}

/// What to do with the library a server holds (`None`: loaded without `rl_version`, a
/// version before 1.1).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Use,
    Replace,
}

pub(crate) fn verdict(
    held: Option<Version>,
    carried: Version,
    load: LoadLibrary,
) -> Result<Verdict, Error> {
    let shown = held.map_or("unversioned (before 1.1)".to_string(), |v| v.to_string());
    match held {
        Some(v) if v.major == carried.major && v.minor >= carried.minor => Ok(Verdict::Use),
        Some(v) if v.major > carried.major => Err(Error::Unsupported(format!(
            "the server's ratelimit library is version {shown}, newer than this client's {carried} \
             and incompatible with it: upgrade the client, or load its library with `{LOAD_COMMAND}`"
        ))),
        _ if load == LoadLibrary::Replace => Ok(Verdict::Replace),
        _ => Err(Error::Unsupported(format!(
            "the server's ratelimit library is version {shown}, this client needs {carried}: \
             load it with `{LOAD_COMMAND}` (on every master of a Cluster), or set \
             REDIS_LOAD_LIBRARY=replace"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn the_carried_source_declares_its_version() {
        assert!(Version::carried() >= v("1.1"));
    }

    #[test]
    fn versions_are_used_replaced_or_refused() {
        let carried = v("1.1");
        for load in [LoadLibrary::No, LoadLibrary::Missing, LoadLibrary::Replace] {
            assert_eq!(
                verdict(Some(v("1.1")), carried, load).ok(),
                Some(Verdict::Use)
            );
            assert_eq!(
                verdict(Some(v("1.4")), carried, load).ok(),
                Some(Verdict::Use)
            );
            let newer = verdict(Some(v("2.0")), carried, load)
                .unwrap_err()
                .to_string();
            assert!(newer.contains("2.0") && newer.contains("1.1"), "{newer}");
        }
        for held in [None, Some(v("1.0")), Some(v("0.9"))] {
            assert_eq!(
                verdict(held, carried, LoadLibrary::Replace).ok(),
                Some(Verdict::Replace)
            );
            let refused = verdict(held, carried, LoadLibrary::Missing)
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("needs 1.1")
                    && refused.contains("FUNCTION LOAD REPLACE")
                    && refused.contains("REDIS_LOAD_LIBRARY=replace"),
                "{refused}"
            );
        }
        assert!("yes".parse::<LoadLibrary>().is_err());
    }
}
