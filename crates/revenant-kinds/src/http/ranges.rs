//! The address ranges the `http` kind refuses by default, and why: each is a place a
//! producer could reach through the worker that it could not reach itself (the
//! worker's own loopback services, the cloud metadata endpoint, the private network),
//! or a place no webhook lives (multicast, unspecified, reserved).
//!
//! IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, the deprecated
//! IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96` and 6to4 `2002::/16`) are judged by
//! the IPv4 address inside them, so `::ffff:127.0.0.1` is loopback. Teredo
//! (`2001::/32`) tunnels are refused whole: no webhook lives behind one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// A refused range: the network and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) net: IpNet,
    /// What the range is, as the refusal message says it (`loopback`).
    pub(crate) what: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, what: &'static str) -> Range {
    Range {
        net: IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)),
        what,
    }
}

const fn v6(segments: [u16; 8], len: u8, what: &'static str) -> Range {
    let [a, b, c, d, e, f, g, h] = segments;
    Range {
        net: IpNet::V6(Ipv6Net::new_assert(
            Ipv6Addr::new(a, b, c, d, e, f, g, h),
            len,
        )),
        what,
    }
}

/// IPv4 ranges refused by default (IANA special-purpose registry, the parts a worker
/// could reach and a public webhook never uses).
const REFUSED_V4: [Range; 15] = [
    v4(0, 0, 0, 0, 8, "unspecified (\"this network\")"),
    v4(10, 0, 0, 0, 8, "private (RFC 1918)"),
    v4(100, 64, 0, 0, 10, "shared address space (CGNAT, RFC 6598)"),
    v4(127, 0, 0, 0, 8, "loopback"),
    v4(169, 254, 0, 0, 16, "link-local (cloud metadata lives here)"),
    v4(172, 16, 0, 0, 12, "private (RFC 1918)"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments"),
    v4(192, 0, 2, 0, 24, "documentation (TEST-NET-1)"),
    v4(192, 88, 99, 0, 24, "6to4 relay anycast"),
    v4(192, 168, 0, 0, 16, "private (RFC 1918)"),
    v4(198, 18, 0, 0, 15, "benchmarking"),
    v4(198, 51, 100, 0, 24, "documentation (TEST-NET-2)"),
    v4(203, 0, 113, 0, 24, "documentation (TEST-NET-3)"),
    v4(224, 0, 0, 0, 4, "multicast"),
    v4(240, 0, 0, 0, 4, "reserved or broadcast"),
];

/// IPv6 ranges refused by default. The forms carrying an IPv4 address are handled
/// apart (see [`embedded_v4`]).
const REFUSED_V6: [Range; 8] = [
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo tunnel"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique-local (private)"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    v6(
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "site-local (deprecated, private)",
    ),
];

const MULTICAST_V6: Range = v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast");

/// The IPv4 address an IPv6 address stands for, when it is one of the forms that
/// carry one: IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`, deprecated),
/// NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`, the address in bits 16..48).
pub(crate) fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let last = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(last()),
        // `::` and `::1` are IPv6's own unspecified and loopback, not 0.0.0.0/0.0.0.1.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(last()),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last()),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The refused range `ip` falls in, or `None` for an address the default policy lets
/// through. An IPv6 form carrying an IPv4 address is judged by that address.
pub(crate) fn refused_range(ip: IpAddr) -> Option<Range> {
    match ip {
        // The broadcast address 255.255.255.255 is in 240.0.0.0/4.
        IpAddr::V4(_) => REFUSED_V4.iter().copied().find(|r| r.net.contains(&ip)),
        IpAddr::V6(v6) => {
            if let Some(inner) = embedded_v4(v6) {
                return refused_range(IpAddr::V4(inner));
            }
            if MULTICAST_V6.net.contains(&ip) {
                return Some(MULTICAST_V6);
            }
            REFUSED_V6.iter().copied().find(|r| r.net.contains(&ip))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what(ip: &str) -> Option<&'static str> {
        refused_range(ip.parse().unwrap()).map(|r| r.what)
    }

    #[test]
    fn internal_addresses_are_refused_by_range() {
        let table = [
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "link-local (cloud metadata lives here)"),
            ("10.1.2.3", "private (RFC 1918)"),
            ("172.31.255.255", "private (RFC 1918)"),
            ("192.168.0.1", "private (RFC 1918)"),
            ("100.64.0.1", "shared address space (CGNAT, RFC 6598)"),
            ("100.127.255.255", "shared address space (CGNAT, RFC 6598)"),
            ("0.0.0.0", "unspecified (\"this network\")"),
            ("255.255.255.255", "reserved or broadcast"),
            ("224.0.0.1", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique-local (private)"),
            ("fc00::1", "unique-local (private)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            (
                "::ffff:169.254.169.254",
                "link-local (cloud metadata lives here)",
            ),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::10.0.0.1", "private (RFC 1918)"),
            ("2002:7f00:1::", "loopback"),
            ("2002:c0a8:101::1", "private (RFC 1918)"),
            ("2001::1", "Teredo tunnel"),
        ];
        for (ip, expected) in table {
            assert_eq!(what(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.253.255.255",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(what(ip), None, "{ip}");
        }
    }
}
