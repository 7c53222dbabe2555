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
/// address that is not a trusted proxy is the client. An entry that does not parse stops the
/// walk at the proxy that wrote it.
pub fn client_ip(headers: &HeaderMap, peer: IpAddr, trusted: &[Trusted]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|t| t.contains(ip));
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut hop = peer;
    for entry in entries.iter().rev() {
        if !is_trusted(hop) {
            break;
        }
        match parse_entry(entry) {
            Some(ip) => hop = ip,
            None => break,
        }
    }
    hop
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
        // Garbage stops at the proxy that wrote it; all trusted ends at the leftmost.
        assert_eq!(
            client_ip(&xff(&["nonsense"]), ip("10.1.2.3"), &trusted),
            ip("10.1.2.3")
        );
        assert_eq!(
            client_ip(&xff(&["10.0.0.1"]), ip("10.1.2.3"), &trusted),
            ip("10.0.0.1")
        );
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
