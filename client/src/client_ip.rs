//! The client's address from `X-Forwarded-For`, trusting only the proxies you name.

use std::net::IpAddr;

use http::HeaderMap;

/// An address or a network (`10.0.0.0/8`) of proxies whose `X-Forwarded-For` entries are
/// believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trusted {
    net: IpAddr,
    prefix: u8,
}

impl Trusted {
    /// `"192.0.2.7"`, `"10.0.0.0/8"`, `"::1"`, `"fd00::/8"`; `None` if it does not parse.
    pub fn parse(s: &str) -> Option<Trusted> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, p.parse::<u8>().ok()?),
            None => {
                let a = s.parse::<IpAddr>().ok()?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Trusted { net: addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> u128 {
            match ip {
                IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
                IpAddr::V6(v6) => u128::from(v6),
            }
        };
        if self.net.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        // Both kinds sit in the top bits: the prefix is the top `prefix` bits.
        let mask = match self.prefix {
            0 => 0,
            p => u128::MAX << (128 - u32::from(p)),
        };
        bits(self.net) & mask == bits(ip) & mask
    }
}

/// The client's address. `X-Forwarded-For` can be written by anyone, so only the entries added by
/// proxies you trust are believed: starting from the peer (the TCP connection's address), while
/// the current hop is a trusted proxy, step to the entry it appended (right to left); the first
/// address that is not a trusted proxy is the client. The field is read as bytes, entry by entry:
/// an entry that is not an address (empty, garbage, a byte that is not ASCII) is skipped, not the
/// whole field. (Skipping cannot let a client choose its key: only an entry the walk reaches is
/// looked at, and the walk reaches entries only through trusted hops, which could have written
/// any address anyway.)
pub fn client_ip(headers: &HeaderMap, peer: IpAddr, trusted: &[Trusted]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|t| t.contains(ip));
    let entries: Vec<Option<IpAddr>> = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(|e| {
            std::str::from_utf8(e)
                .ok()
                .and_then(|e| parse_entry(e.trim()))
        })
        .collect();
    let mut hop = peer;
    for ip in entries.iter().rev().flatten() {
        if !is_trusted(hop) {
            break;
        }
        hop = *ip;
    }
    hop
}

/// How many leading bits of an address make a rate-limit key: one key per IPv4 address or /24,
/// per IPv6 /64 or /56 (one customer's network: a client rotating addresses inside its /64
/// stays one key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefixes {
    /// 32 (one address) or 24.
    pub v4: u8,
    /// 64 (one customer network) or 56.
    pub v6: u8,
}

impl Default for Prefixes {
    /// IPv4 /32, IPv6 /64.
    fn default() -> Prefixes {
        Prefixes { v4: 32, v6: 64 }
    }
}

impl Prefixes {
    /// The network of `ip` as a key: `203.0.113.9` (/32), `203.0.113.0/24`, `2001:db8:1:2::/64`.
    /// An IPv4-mapped IPv6 address (`::ffff:203.0.113.9`) counts as its IPv4 address.
    pub fn key(&self, ip: IpAddr) -> String {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let p = self.v4.min(32);
                if p == 32 {
                    return v4.to_string();
                }
                let mask = u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0);
                format!("{}/{p}", std::net::Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let p = self.v6.min(128);
                if p == 128 {
                    return v6.to_string();
                }
                let mask = u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0);
                format!("{}/{p}", std::net::Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }
}

/// `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`.
fn parse_entry(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    s.rsplit_once(':')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_last_untrusted_hop_is_the_client() {
        let trusted = [
            Trusted::parse("10.0.0.0/8").unwrap(),
            Trusted::parse("::1").unwrap(),
        ];
        // Straight from the client: the header is whatever it wrote, ignored.
        assert_eq!(
            client_ip(&xff(&["1.1.1.1"]), ip("203.0.113.9"), &trusted),
            ip("203.0.113.9")
        );
        // Through our proxy: the entry it appended.
        assert_eq!(
            client_ip(&xff(&["203.0.113.9"]), ip("10.1.2.3"), &trusted),
            ip("203.0.113.9")
        );
        // A spoofed entry in front of it is not believed.
        let h = xff(&["6.6.6.6, 203.0.113.9"]);
        assert_eq!(client_ip(&h, ip("10.1.2.3"), &trusted), ip("203.0.113.9"));
        // Two of our proxies, the header split over two fields, ports and brackets.
        let h = xff(&["6.6.6.6, 203.0.113.9:5555", "10.9.9.9"]);
        assert_eq!(client_ip(&h, ip("10.1.2.3"), &trusted), ip("203.0.113.9"));
        let h = xff(&["[2001:db8::7]:443"]);
        assert_eq!(client_ip(&h, ip("::1"), &trusted), ip("2001:db8::7"));
        // Garbage is skipped (alone: the rest of the field still counts); all trusted ends at
        // the leftmost.
        assert_eq!(
            client_ip(&xff(&["nonsense"]), ip("10.1.2.3"), &trusted),
            ip("10.1.2.3")
        );
        let h = xff(&["203.0.113.9, nonsense,, 10.0.0.2"]);
        assert_eq!(client_ip(&h, ip("10.1.2.3"), &trusted), ip("203.0.113.9"));
        let mut h = HeaderMap::new();
        let bytes = b"6.6.6.\xff, 203.0.113.9".as_slice();
        h.append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(bytes).unwrap(),
        );
        assert_eq!(client_ip(&h, ip("10.1.2.3"), &trusted), ip("203.0.113.9"));
        assert_eq!(
            client_ip(&xff(&["10.0.0.1"]), ip("10.1.2.3"), &trusted),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn prefix_keys() {
        let p = Prefixes::default();
        assert_eq!(p.key(ip("203.0.113.9")), "203.0.113.9");
        assert_eq!(p.key(ip("2001:db8:1:2:aaaa::1")), "2001:db8:1:2::/64");
        assert_eq!(p.key(ip("2001:db8:1:2:ffff::9")), "2001:db8:1:2::/64");
        assert_eq!(p.key(ip("::ffff:203.0.113.9")), "203.0.113.9");
        let wide = Prefixes { v4: 24, v6: 56 };
        assert_eq!(wide.key(ip("203.0.113.9")), "203.0.113.0/24");
        assert_eq!(wide.key(ip("2001:db8:1:2ff::1")), "2001:db8:1:200::/56");
        let whole = Prefixes { v4: 0, v6: 128 };
        assert_eq!(whole.key(ip("203.0.113.9")), "0.0.0.0/0");
        assert_eq!(whole.key(ip("2001:db8::1")), "2001:db8::1");
    }

    #[test]
    fn networks() {
        let t = Trusted::parse("192.168.0.0/16").unwrap();
        assert!(t.contains(ip("192.168.44.1")));
        assert!(!t.contains(ip("192.169.0.1")));
        assert!(!t.contains(ip("::ffff:192.168.0.1")));
        assert!(Trusted::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Trusted::parse("1.2.3.4").unwrap().contains(ip("1.2.3.4")));
        assert!(!Trusted::parse("1.2.3.4").unwrap().contains(ip("1.2.3.5")));
        assert!(Trusted::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
        assert!(Trusted::parse("10.0.0.0/33").is_none());
        assert!(Trusted::parse("nope").is_none());
    }
}
