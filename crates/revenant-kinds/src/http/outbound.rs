//! The `http` kind's outbound policy: which destinations a worker refuses to call on
//! a producer's behalf, and what the operator opens.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::ranges::{self, Range};

/// Where the `http` kind may send requests.
///
/// By default ([`OutboundPolicy::new`]) every public address is allowed and every
/// internal one refused: loopback, link-local (where cloud metadata endpoints such as
/// 169.254.169.254 hand out credentials), private (RFC 1918, CGNAT 100.64/10, IPv6
/// unique-local fc00::/7), multicast, unspecified, broadcast and reserved ranges, and
/// the IPv6 forms that carry one of those IPv4 addresses (`::ffff:127.0.0.1`,
/// 6to4, NAT64). A producer controls a job's URL entirely; without this, it could use
/// the worker to reach what only the worker can (a no-token `revenant serve` on the
/// worker's loopback, the metadata endpoint, the private network) and read the
/// answers back from the job's error history.
///
/// The check is made on the addresses actually connected to: a host name is resolved
/// by the kind's own resolver, which drops refused addresses (and fails when none is
/// left), so a name that resolves to 127.0.0.1, or re-resolves to it between a check
/// and the connection (DNS rebinding), is refused. A URL with an IP literal (in any
/// form the URL parser accepts: `http://2130706433/` is 127.0.0.1) is checked before
/// anything is sent.
///
/// The allow list opens what the operator means to reach:
/// [`allow_cidr`](Self::allow_cidr) for address ranges, [`allow_host`](Self::allow_host)
/// for host names (every address the name resolves to is then allowed), and
/// [`allow_net`](Self::allow_net) for either, as `revenant work --allow-net` takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    nets: Vec<IpNet>,
    hosts: BTreeSet<String>,
}

/// An allow-list entry that is not a CIDR, an IP address or a host name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboundPolicyError {
    /// The entry has a `/` but is not a CIDR (`10.0.0.0/8`, `fd00::/8`).
    #[error("{spec:?} is not a CIDR (like 10.0.0.0/8 or fd00::/8): {source}")]
    Cidr {
        /// The entry as given.
        spec: String,
        /// Why it does not parse.
        #[source]
        source: ipnet::AddrParseError,
    },
    /// The entry is neither an IP address nor a host name (`hooks.internal`).
    #[error("{spec:?} is not an IP address, a CIDR or a host name: {reason}")]
    Host {
        /// The entry as given.
        spec: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A destination the outbound policy refused: nothing was sent to it.
///
/// Its message names the address, the range it falls in and the entry that would
/// allow it: `http: destination 127.0.0.1 is loopback; refused by the outbound policy
/// (allow it with --allow-net 127.0.0.1/32)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationRefused {
    host: Option<String>,
    ip: IpAddr,
    range: Range,
}

impl DestinationRefused {
    /// The refused address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The refused range it falls in (`127.0.0.0/8`).
    pub fn range(&self) -> IpNet {
        self.range.net
    }
}

impl std::fmt::Display for DestinationRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let single = IpNet::from(self.ip);
        match &self.host {
            Some(host) => write!(
                f,
                "http: destination {host} ({}) is {} ({}); refused by the outbound policy (allow it with --allow-net {single} or --allow-net {host})",
                self.ip, self.range.what, self.range.net
            ),
            None => write!(
                f,
                "http: destination {} is {} ({}); refused by the outbound policy (allow it with --allow-net {single})",
                self.ip, self.range.what, self.range.net
            ),
        }
    }
}

impl std::error::Error for DestinationRefused {}

impl OutboundPolicy {
    /// The default policy: public addresses only, nothing internal allowed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows the addresses in `net`, whatever range they fall in.
    pub fn allow_cidr(mut self, net: IpNet) -> Self {
        let net = net.trunc();
        if !self.nets.contains(&net) {
            self.nets.push(net);
        }
        self
    }

    /// Allows every address `host` resolves to (compared without case or a trailing
    /// dot). An IP address given here is allowed as a single-address CIDR.
    ///
    /// Trusting a name trusts whoever controls its DNS: prefer a CIDR for hosts on
    /// your own network.
    pub fn allow_host(self, host: &str) -> Result<Self, OutboundPolicyError> {
        let spec = host.trim();
        if let Some(ip) = ip_literal(spec) {
            return Ok(self.allow_cidr(IpNet::from(ip)));
        }
        let name = host_name(spec)?;
        let mut policy = self;
        policy.hosts.insert(name);
        Ok(policy)
    }

    /// Allows one entry as `revenant work --allow-net` takes it: a CIDR
    /// (`10.20.0.0/16`, `fd00::/8`), an IP address (`127.0.0.1`, `::1`, `[::1]`), or a
    /// host name (`hooks.internal`).
    pub fn allow_net(self, spec: &str) -> Result<Self, OutboundPolicyError> {
        let spec = spec.trim();
        if spec.contains('/') {
            let net: IpNet = spec.parse().map_err(|source| OutboundPolicyError::Cidr {
                spec: spec.to_string(),
                source,
            })?;
            return Ok(self.allow_cidr(net));
        }
        self.allow_host(spec)
    }

    /// Whether `host` (a name from a URL) is on the allow list by name.
    pub(crate) fn allows_host(&self, host: &str) -> bool {
        !self.hosts.is_empty() && self.hosts.contains(&normalize(host))
    }

    /// Checks one address; `host` is the name it was resolved from, for the message.
    pub fn check(&self, host: Option<&str>, ip: IpAddr) -> Result<(), DestinationRefused> {
        let allowed = |ip: IpAddr| self.nets.iter().any(|net| net.contains(&ip));
        if allowed(ip) {
            return Ok(());
        }
        if let IpAddr::V6(v6) = ip {
            // An operator who allowed 127.0.0.1/32 also allowed ::ffff:127.0.0.1.
            if ranges::embedded_v4(v6).is_some_and(|v4| allowed(IpAddr::V4(v4))) {
                return Ok(());
            }
        }
        match ranges::refused_range(ip) {
            None => Ok(()),
            Some(range) => Err(DestinationRefused {
                host: host.map(str::to_string),
                ip,
                range,
            }),
        }
    }

    /// Checks a URL's host when it is an IP literal (those never reach the resolver).
    /// Host names are checked by the resolver, on the addresses it finds.
    pub(crate) fn check_literal(&self, url_host: &str) -> Result<(), DestinationRefused> {
        match ip_literal(url_host) {
            Some(ip) => self.check(None, ip),
            None => Ok(()),
        }
    }

    /// The resolved addresses of `host` this policy allows; refused when none is left
    /// (naming the first refused one).
    pub(crate) fn filter(
        &self,
        host: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, DestinationRefused> {
        let addrs: Vec<SocketAddr> = addrs.into_iter().collect();
        if self.allows_host(host) {
            return Ok(addrs);
        }
        let mut first_refusal = None;
        let mut kept = Vec::with_capacity(addrs.len());
        for addr in addrs {
            match self.check(Some(host), addr.ip()) {
                Ok(()) => kept.push(addr),
                Err(refused) => {
                    first_refusal.get_or_insert(refused);
                }
            }
        }
        match (kept.is_empty(), first_refusal) {
            (true, Some(refused)) => Err(refused),
            _ => Ok(kept),
        }
    }
}

/// An IP address as a URL host or an allow entry writes it (`[::1]` or `::1`).
fn ip_literal(text: &str) -> Option<IpAddr> {
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    bare.parse().ok()
}

fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// A DNS name: letters, digits, `-` and `_` in dot-separated labels of 1..=63 bytes.
fn host_name(spec: &str) -> Result<String, OutboundPolicyError> {
    let refuse = |reason| OutboundPolicyError::Host {
        spec: spec.to_string(),
        reason,
    };
    let name = normalize(spec);
    if name.is_empty() {
        return Err(refuse("it is empty"));
    }
    if name.contains("://") || name.contains(':') {
        return Err(refuse(
            "give the host alone, without scheme or port (the policy is per address)",
        ));
    }
    if name.len() > 253 {
        return Err(refuse("it is longer than 253 bytes"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(refuse("each dot-separated label needs 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(refuse("only letters, digits, '-' and '_' are allowed"));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_default_refuses_loopback_and_names_the_rule() {
        let refused = OutboundPolicy::new()
            .check(None, ip("127.0.0.1"))
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "http: destination 127.0.0.1 is loopback (127.0.0.0/8); refused by the outbound policy (allow it with --allow-net 127.0.0.1/32)"
        );
        let refused = OutboundPolicy::new()
            .check(Some("localhost"), ip("::1"))
            .unwrap_err();
        assert!(refused
            .to_string()
            .contains("--allow-net ::1/128 or --allow-net localhost"));
    }

    #[test]
    fn an_allowed_cidr_opens_its_addresses_and_their_mapped_forms() {
        let policy = OutboundPolicy::new().allow_net("127.0.0.0/8").unwrap();
        assert!(policy.check(None, ip("127.0.0.1")).is_ok());
        assert!(policy.check(None, ip("::ffff:127.0.0.1")).is_ok());
        assert!(policy.check(None, ip("::1")).is_err());
        assert!(policy.check(None, ip("10.0.0.1")).is_err());
        let policy = OutboundPolicy::new().allow_net("[::1]").unwrap();
        assert!(policy.check(None, ip("::1")).is_ok());
    }

    #[test]
    fn a_resolved_name_keeps_only_allowed_addresses() {
        let addrs = [
            SocketAddr::new(ip("127.0.0.1"), 0),
            SocketAddr::new(ip("93.184.215.14"), 0),
        ];
        let kept = OutboundPolicy::new()
            .filter("mixed.example", addrs)
            .unwrap();
        assert_eq!(kept, vec![addrs[1]]);
        let refused = OutboundPolicy::new()
            .filter("localhost", [addrs[0]])
            .unwrap_err();
        assert_eq!(refused.ip(), ip("127.0.0.1"));
        let by_name = OutboundPolicy::new().allow_host("LocalHost.").unwrap();
        assert_eq!(
            by_name.filter("localhost", [addrs[0]]).unwrap(),
            vec![addrs[0]]
        );
    }

    #[test]
    fn bad_allow_entries_are_refused() {
        for spec in [
            "10.0.0.0/33",
            "10.0.0/8",
            "http://hooks.internal",
            "hooks.internal:8080",
            "",
            "a..b",
            "bad host",
        ] {
            assert!(OutboundPolicy::new().allow_net(spec).is_err(), "{spec:?}");
        }
    }
}
