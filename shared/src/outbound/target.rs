//! Which addresses a dispatch may reach when `TARGET_DENY_PRIVATE` is on.
//!
//! One policy, [`refusal`], judges every address, wherever it comes from:
//! an IP literal in a URL being saved (the API's 422), the same literal
//! before sending (a job saved before the rule, or with the rule off), and
//! every answer of the resolver at connect time. The resolver has the last
//! word: a name that resolved to a public address at save time can resolve
//! to 127.0.0.1 at dispatch time (DNS rebinding), so names other than the
//! local host's are only judged there.
//!
//! The policy follows the IANA special-purpose address registries (RFC 6890
//! and its updates) and the IPv6 address space registry. The few registry
//! entries marked globally reachable (PCP and TURN anycast, AS112, AMT) are
//! infrastructure, never someone's endpoint, so the whole registry is
//! refused, except the blocks whose purpose is to carry an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64, 6to4): those are judged by the
//! IPv4 address they carry, as a stack or translator delivers them there.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A target refused under `TARGET_DENY_PRIVATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetDenied {
    /// The URL names the address, so saying why it is refused tells the
    /// caller nothing about the network it does not already know.
    Address { addr: IpAddr, why: Refusal },
    /// A name reserved for the local host (RFC 6761), whatever it resolves to.
    LocalName(String),
    /// A name answered with a refused address. Which address, or which kind,
    /// stays out of the message: it lands on the run, and echoing it would
    /// let anyone who may create a job map internal DNS.
    Resolved,
}

impl fmt::Display for TargetDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const RULE: &str = "TARGET_DENY_PRIVATE allows public addresses only";
        match self {
            TargetDenied::Address { addr, why: Refusal { block, embedded: None } } => {
                write!(f, "{addr} is in {block}; {RULE}")
            }
            TargetDenied::Address { addr, why: Refusal { block, embedded: Some(v4) } } => {
                write!(f, "{addr} carries {v4}, which is in {block}; {RULE}")
            }
            TargetDenied::LocalName(host) => write!(f, "{host} names the local host; {RULE}"),
            TargetDenied::Resolved => f.write_str("the target's address is not allowed (TARGET_DENY_PRIVATE)"),
        }
    }
}

impl StdError for TargetDenied {}

/// One entry of the registries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub net: IpAddr,
    pub len: u8,
    pub name: &'static str,
    rule: Rule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Deny,
    /// The IPv4 address at this bit offset decides.
    Embeds(u32),
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}/{})", self.name, self.net, self.len)
    }
}

impl Block {
    fn contains(&self, ip: IpAddr) -> bool {
        let (net, addr, width) = match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u128::from(u32::from(n)), u128::from(u32::from(a)), 32),
            (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128),
            _ => return false,
        };
        let host_bits = width - u32::from(self.len);
        net.checked_shr(host_bits).unwrap_or(0) == addr.checked_shr(host_bits).unwrap_or(0)
    }
}

/// Why an address is refused: its block, and for an address that carries an
/// IPv4 address, that address (whose block it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub block: &'static Block,
    pub embedded: Option<Ipv4Addr>,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, name: &'static str) -> Block {
    Block { net: IpAddr::V4(Ipv4Addr::new(a, b, c, d)), len, name, rule: Rule::Deny }
}

const fn v6(s: [u16; 8], len: u8, name: &'static str, rule: Rule) -> Block {
    let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
    Block { net: IpAddr::V6(net), len, name, rule }
}

/// The IPv4 special-purpose registry, plus multicast (its own registry).
/// The first match names the block, so narrower entries come first.
const V4: &[Block] = &[
    v4(0, 0, 0, 0, 8, "\"this network\""),
    v4(10, 0, 0, 0, 8, "private-use"),
    v4(100, 64, 0, 0, 10, "shared address space"),
    v4(127, 0, 0, 0, 8, "loopback"),
    v4(169, 254, 0, 0, 16, "link-local"),
    v4(172, 16, 0, 0, 12, "private-use"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments"),
    v4(192, 0, 2, 0, 24, "documentation (TEST-NET-1)"),
    v4(192, 31, 196, 0, 24, "AS112-v4"),
    v4(192, 52, 193, 0, 24, "AMT"),
    v4(192, 88, 99, 0, 24, "deprecated 6to4 relay anycast"),
    v4(192, 168, 0, 0, 16, "private-use"),
    v4(192, 175, 48, 0, 24, "direct delegation AS112 service"),
    v4(198, 18, 0, 0, 15, "benchmarking"),
    v4(198, 51, 100, 0, 24, "documentation (TEST-NET-2)"),
    v4(203, 0, 113, 0, 24, "documentation (TEST-NET-3)"),
    v4(224, 0, 0, 0, 4, "multicast"),
    v4(255, 255, 255, 255, 32, "limited broadcast"),
    v4(240, 0, 0, 0, 4, "reserved"),
];

/// The IPv6 special-purpose registry, plus multicast, and site-local (a
/// deprecated block some networks still route internally).
const V6: &[Block] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified", Rule::Deny),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback", Rule::Deny),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "IPv4-mapped", Rule::Embeds(96)),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible (deprecated)", Rule::Embeds(96)),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "IPv4/IPv6 translation (NAT64)", Rule::Embeds(96)),
    // Local-use prefixes place the IPv4 address wherever the operator's
    // prefix length puts it, and translate into the operator's network.
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "local-use IPv4/IPv6 translation", Rule::Deny),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only", Rule::Deny),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "dummy prefix", Rule::Deny),
    // Teredo's client address is obfuscated and its server is a relay:
    // neither says where the packets end up.
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo", Rule::Deny),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "IETF protocol assignments", Rule::Deny),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation", Rule::Deny),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4", Rule::Embeds(16)),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "direct delegation AS112 service", Rule::Deny),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation", Rule::Deny),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "segment routing SIDs", Rule::Deny),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique-local", Rule::Deny),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local", Rule::Deny),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local (deprecated)", Rule::Deny),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast", Rule::Deny),
];

/// Outside 2000::/3 nothing is allocated for global unicast (IANA IPv6
/// address space registry), so an answer there can only reach a network
/// that routes it privately.
const GLOBAL_UNICAST: Block = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "global unicast", Rule::Deny);
const NOT_GLOBAL_UNICAST: Block =
    v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "reserved space outside global unicast", Rule::Deny);

/// Why `ip` may not be reached under `TARGET_DENY_PRIVATE`; `None` for a
/// public address.
pub fn refusal(ip: IpAddr) -> Option<Refusal> {
    let table = if ip.is_ipv4() { V4 } else { V6 };
    match table.iter().find(|b| b.contains(ip)) {
        Some(block) => match (block.rule, ip) {
            (Rule::Embeds(at), IpAddr::V6(v6)) => {
                let v4 = Ipv4Addr::from((u128::from(v6) >> (96 - at)) as u32);
                refusal(IpAddr::V4(v4)).map(|r| Refusal { block: r.block, embedded: Some(v4) })
            }
            _ => Some(Refusal { block, embedded: None }),
        },
        None if ip.is_ipv6() && !GLOBAL_UNICAST.contains(ip) => {
            Some(Refusal { block: &NOT_GLOBAL_UNICAST, embedded: None })
        }
        None => None,
    }
}

pub fn is_non_public(ip: IpAddr) -> bool {
    refusal(ip).is_some()
}

/// Names that mean this host whatever the resolver is configured to say.
fn is_local_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

/// What can be judged from the URL alone: an IP literal (which never
/// reaches the resolver) and the local host's names. Other names are left
/// to [`DenyPrivateResolver`].
pub fn check_host(url: &url::Url) -> Result<(), TargetDenied> {
    let addr = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(d)) if is_local_name(d) => return Err(TargetDenied::LocalName(d.to_string())),
        _ => return Ok(()),
    };
    match refusal(addr) {
        Some(why) => Err(TargetDenied::Address { addr, why }),
        None => Ok(()),
    }
}

/// The system resolver, refusing any name with a refused answer. All
/// answers are checked, not just the first: the connector may try any.
#[derive(Debug, Default)]
pub struct DenyPrivateResolver;

impl Resolve for DenyPrivateResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.iter().any(|a| is_non_public(a.ip())) {
                return Err(Box::new(TargetDenied::Resolved) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The [`TargetDenied`] somewhere in an error's source chain, if any: the
/// resolver's refusal reaches the caller wrapped in reqwest's and hyper's errors.
pub fn denied_in(err: &(dyn StdError + 'static)) -> Option<TargetDenied> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(d) = e.downcast_ref::<TargetDenied>() {
            return Some(d.clone());
        }
        cur = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each registry entry, by an address inside it and the block named.
    const REFUSED: &[(&str, &str)] = &[
        ("0.0.0.0", "\"this network\" (0.0.0.0/8)"),
        ("0.255.255.255", "\"this network\" (0.0.0.0/8)"),
        ("10.1.2.3", "private-use (10.0.0.0/8)"),
        ("100.64.0.1", "shared address space (100.64.0.0/10)"),
        ("100.127.255.254", "shared address space (100.64.0.0/10)"),
        ("127.0.0.1", "loopback (127.0.0.0/8)"),
        ("127.255.255.254", "loopback (127.0.0.0/8)"),
        ("169.254.169.254", "link-local (169.254.0.0/16)"),
        ("172.16.0.1", "private-use (172.16.0.0/12)"),
        ("172.31.255.255", "private-use (172.16.0.0/12)"),
        ("192.0.0.9", "IETF protocol assignments (192.0.0.0/24)"),
        ("192.0.0.170", "IETF protocol assignments (192.0.0.0/24)"),
        ("192.0.2.1", "documentation (TEST-NET-1) (192.0.2.0/24)"),
        ("192.31.196.1", "AS112-v4 (192.31.196.0/24)"),
        ("192.52.193.1", "AMT (192.52.193.0/24)"),
        ("192.88.99.1", "deprecated 6to4 relay anycast (192.88.99.0/24)"),
        ("192.168.1.1", "private-use (192.168.0.0/16)"),
        ("192.175.48.1", "direct delegation AS112 service (192.175.48.0/24)"),
        ("198.18.0.1", "benchmarking (198.18.0.0/15)"),
        ("198.19.255.255", "benchmarking (198.18.0.0/15)"),
        ("198.51.100.7", "documentation (TEST-NET-2) (198.51.100.0/24)"),
        ("203.0.113.7", "documentation (TEST-NET-3) (203.0.113.0/24)"),
        ("224.0.0.1", "multicast (224.0.0.0/4)"),
        ("239.255.255.250", "multicast (224.0.0.0/4)"),
        ("240.0.0.1", "reserved (240.0.0.0/4)"),
        ("255.255.255.255", "limited broadcast (255.255.255.255/32)"),
        ("::", "unspecified (::/128)"),
        ("::1", "loopback (::1/128)"),
        ("::ffff:127.0.0.1", "loopback (127.0.0.0/8)"),
        ("::ffff:10.0.0.1", "private-use (10.0.0.0/8)"),
        ("::10.0.0.1", "private-use (10.0.0.0/8)"),
        ("::127.0.0.1", "loopback (127.0.0.0/8)"),
        ("64:ff9b::7f00:1", "loopback (127.0.0.0/8)"),
        ("64:ff9b::a9fe:a9fe", "link-local (169.254.0.0/16)"),
        ("64:ff9b:1::808:808", "local-use IPv4/IPv6 translation (64:ff9b:1::/48)"),
        ("100::1", "discard-only (100::/64)"),
        ("100:0:0:1::1", "dummy prefix (100:0:0:1::/64)"),
        ("2001::1", "Teredo (2001::/32)"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo (2001::/32)"),
        ("2001:2::1", "IETF protocol assignments (2001::/23)"),
        ("2001:1ff::1", "IETF protocol assignments (2001::/23)"),
        ("2001:db8::1", "documentation (2001:db8::/32)"),
        ("2002:7f00:1::", "loopback (127.0.0.0/8)"),
        ("2002:c0a8:101::1", "private-use (192.168.0.0/16)"),
        ("2002:c612:1::", "benchmarking (198.18.0.0/15)"),
        ("2620:4f:8000::1", "direct delegation AS112 service (2620:4f:8000::/48)"),
        ("3fff::1", "documentation (3fff::/20)"),
        ("5f00::1", "segment routing SIDs (5f00::/16)"),
        ("fc00::1", "unique-local (fc00::/7)"),
        ("fd00::1", "unique-local (fc00::/7)"),
        ("fe80::1", "link-local (fe80::/10)"),
        ("fec0::1", "site-local (deprecated) (fec0::/10)"),
        ("ff02::1", "multicast (ff00::/8)"),
        ("ff0e::1", "multicast (ff00::/8)"),
        ("::1:0:0:1", "reserved space outside global unicast (2000::/3)"),
        ("4000::1", "reserved space outside global unicast (2000::/3)"),
    ];

    const ALLOWED: &[&str] = &[
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.128.0.1",
        "172.32.0.1",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700::1111",
        "2001:4860:4860::8888",
        "2001:200::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ];

    #[test]
    fn every_registry_entry_is_refused_and_public_addresses_pass() {
        for (ip, block) in REFUSED {
            let why = refusal(ip.parse().unwrap()).unwrap_or_else(|| panic!("{ip} should be refused"));
            assert_eq!(why.block.to_string(), *block, "{ip}");
        }
        for ip in ALLOWED {
            assert_eq!(refusal(ip.parse().unwrap()), None, "{ip} should be allowed");
        }
    }

    #[test]
    fn an_embedded_address_is_named_in_the_message() {
        let u = url::Url::parse("http://[2002:7f00:1::]/").unwrap();
        let msg = check_host(&u).unwrap_err().to_string();
        assert_eq!(
            msg,
            "2002:7f00:1:: carries 127.0.0.1, which is in loopback (127.0.0.0/8); \
             TARGET_DENY_PRIVATE allows public addresses only"
        );
    }

    #[test]
    fn hosts_are_judged_from_the_url_where_they_can_be() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(check_host(&u("http://127.0.0.1:8080/x")).is_err());
        assert!(check_host(&u("http://[::1]/x")).is_err());
        // The URL parser reads these as 127.0.0.1.
        assert!(check_host(&u("http://2130706433/x")).is_err());
        assert!(check_host(&u("http://0x7f.1/x")).is_err());
        for local in ["http://localhost/", "http://LOCALHOST./", "http://api.localhost:8080/"] {
            assert!(matches!(check_host(&u(local)), Err(TargetDenied::LocalName(_))), "{local}");
        }
        assert!(check_host(&u("https://8.8.8.8/x")).is_ok());
        assert!(check_host(&u("https://example.com/x")).is_ok(), "names go through the resolver");
        assert!(check_host(&u("https://localhost.example.com/x")).is_ok());
    }

    #[tokio::test]
    async fn the_resolver_refuses_without_saying_what_a_name_resolved_to() {
        let name: Name = "localhost".parse().unwrap();
        let err = match DenyPrivateResolver.resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let denied = denied_in(err.as_ref()).unwrap();
        assert_eq!(denied, TargetDenied::Resolved);
        let msg = denied.to_string();
        assert_eq!(msg, "the target's address is not allowed (TARGET_DENY_PRIVATE)");
        assert!(!msg.contains("127.0.0.1") && !msg.contains("::1"), "{msg}");
    }
}
