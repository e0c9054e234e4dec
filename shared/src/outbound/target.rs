//! Which addresses a dispatch may reach when `TARGET_DENY_PRIVATE` is on.
//!
//! The check has to happen where the connection is made, not when the job is
//! created: a name that resolved to a public address at create time can
//! resolve to 127.0.0.1 at dispatch time (DNS rebinding). So the HTTP client
//! gets a resolver that refuses private answers, and URLs that name an IP
//! literal (which skip the resolver) are checked before sending.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A target refused because it is, or resolves to, a non-public address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDenied {
    pub host: String,
    pub addr: IpAddr,
}

impl fmt::Display for TargetDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "target {} resolves to non-public address {}", self.host, self.addr)
    }
}

impl StdError for TargetDenied {}

/// Loopback, private, link-local, unique-local, shared (CGNAT), unspecified
/// and broadcast addresses, including IPv4 addresses written as IPv6.
pub fn is_non_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_non_public(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_non_public(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated, still routable inside sites)
                || is_v4_compatible_non_public(v6)
        }
    }
}

fn v4_non_public(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || a == 0 // "this network" 0.0.0.0/8
        || (a == 100 && (64..128).contains(&b)) // shared address space 100.64.0.0/10
}

/// `::a.b.c.d` (deprecated IPv4-compatible form) still reaches the IPv4 host
/// on some stacks.
fn is_v4_compatible_non_public(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    s[..6].iter().all(|x| *x == 0) && !v6.is_unspecified() && !v6.is_loopback() && {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        v4_non_public(Ipv4Addr::new(a, b, c, d))
    }
}

/// The refusal for a URL whose host is a non-public IP literal. Names are
/// left to [`DenyPrivateResolver`].
pub fn check_literal(url: &url::Url) -> Result<(), TargetDenied> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if is_non_public(ip) {
        return Err(TargetDenied { host: ip.to_string(), addr: ip });
    }
    Ok(())
}

/// The system resolver, refusing any name with a non-public answer. All
/// answers are checked, not just the first: the connector may try any.
#[derive(Debug, Default)]
pub struct DenyPrivateResolver;

impl Resolve for DenyPrivateResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| is_non_public(a.ip())) {
                return Err(Box::new(TargetDenied { host, addr: bad.ip() }) as Box<dyn StdError + Send + Sync>);
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

    #[test]
    fn classifies_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::10.0.0.1",
        ] {
            assert!(is_non_public(ip.parse().unwrap()), "{ip} should be refused");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "100.128.0.1", "2001:4860:4860::8888", "::ffff:8.8.8.8"] {
            assert!(!is_non_public(ip.parse().unwrap()), "{ip} should be allowed");
        }
    }

    #[test]
    fn literals_are_checked_before_sending() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(check_literal(&u("http://127.0.0.1:8080/x")).is_err());
        assert!(check_literal(&u("http://[::1]/x")).is_err());
        assert!(check_literal(&u("https://8.8.8.8/x")).is_ok());
        assert!(check_literal(&u("https://example.com/x")).is_ok(), "names go through the resolver");
    }

    #[tokio::test]
    async fn the_resolver_refuses_loopback_names() {
        let name: Name = "localhost".parse().unwrap();
        let err = match DenyPrivateResolver.resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let denied = denied_in(err.as_ref()).unwrap();
        assert_eq!(denied.host, "localhost");
        assert!(denied.addr.is_loopback());
    }
}
