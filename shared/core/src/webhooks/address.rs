//! The callback URL policy: on AWS only https URLs whose host resolves to public
//! addresses; the standalone service may allow http and private addresses (local
//! development). Checked at registration (syntax and IP literals) and again by the
//! transport at connect time on the resolved addresses, which it then connects to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// Longest callback URL accepted.
pub const MAX_URL_LEN: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackPolicy {
    /// `http://` URLs are accepted (else https only).
    pub allow_http: bool,
    /// Loopback, private, link-local ... addresses are accepted.
    pub allow_private: bool,
}

impl CallbackPolicy {
    /// AWS: https and public addresses only.
    pub const STRICT: CallbackPolicy = CallbackPolicy {
        allow_http: false,
        allow_private: false,
    };
    /// Local development: anything reachable.
    pub const LOCAL: CallbackPolicy = CallbackPolicy {
        allow_http: true,
        allow_private: true,
    };

    /// Whether the transport may connect to `ip`.
    pub fn allows_address(&self, ip: IpAddr) -> bool {
        self.allow_private || is_public(ip)
    }
}

/// Checks a callback URL against the policy; the message says what is wrong.
pub fn check_callback_url(raw: &str, policy: &CallbackPolicy) -> Result<Url, String> {
    if raw.len() > MAX_URL_LEN {
        return Err(format!("longer than {MAX_URL_LEN} characters"));
    }
    let url = Url::parse(raw).map_err(|e| format!("not an absolute URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        "http" => return Err("must use https".into()),
        other => return Err(format!("scheme {other} is not supported; use https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a fragment".into());
    }
    match url.host() {
        None => return Err("has no host".into()),
        Some(Host::Ipv4(ip)) => check_ip(IpAddr::V4(ip), policy)?,
        Some(Host::Ipv6(ip)) => check_ip(IpAddr::V6(ip), policy)?,
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let local = name == "localhost"
                || name.ends_with(".localhost")
                || name.ends_with(".internal")
                || name.ends_with(".local")
                || !name.contains('.');
            if local && !policy.allow_private {
                return Err(format!("host {name} is not a public name"));
            }
        }
    }
    Ok(url)
}

fn check_ip(ip: IpAddr, policy: &CallbackPolicy) -> Result<(), String> {
    if policy.allows_address(ip) {
        Ok(())
    } else {
        Err(format!("address {ip} is not public"))
    }
}

/// Whether `ip` is a public unicast address. Blocked: unspecified, loopback, private,
/// link-local (and so the instance metadata service), CGNAT, benchmarking, documentation,
/// reserved, multicast and broadcast ranges; IPv6 unique-local, link-local, and every
/// address embedding IPv4 (mapped, compatible, NAT64, 6to4, Teredo).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments 192.0.0.0/24
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18.0.0/15
        || a >= 240) // reserved 240.0.0.0/4
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embeds_v4 = ip.to_ipv4_mapped().is_some()
        || (s[0..6] == [0; 6]) // IPv4-compatible (and ::, ::1)
        || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 64:ff9b::/96 and /48
        || s[0] == 0x2002 // 6to4
        || (s[0] == 0x2001 && s[1] == 0); // Teredo
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || embeds_v4
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0; 3])) // discard-only 100::/64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(url: &str) -> Result<Url, String> {
        check_callback_url(url, &CallbackPolicy::STRICT)
    }

    #[test]
    fn strict_policy_takes_public_https_only() {
        assert!(strict("https://hooks.example.com/pricing?x=1").is_ok());
        assert!(strict("https://93.184.216.34/in").is_ok());
        for bad in [
            "http://hooks.example.com/",
            "ftp://hooks.example.com/",
            "https://localhost/",
            "https://api.localhost/",
            "https://intranet/",
            "https://127.0.0.1/",
            "https://10.1.2.3/",
            "https://172.16.0.1/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:8.8.8.8]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://user:pw@hooks.example.com/",
            "https://hooks.example.com/#frag",
            "not a url",
            "/relative",
        ] {
            assert!(strict(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn local_policy_takes_http_and_private_addresses() {
        let local = CallbackPolicy::LOCAL;
        for ok in [
            "http://127.0.0.1:8080/hook",
            "http://localhost:9000/",
            "https://[::1]:8443/x",
        ] {
            assert!(check_callback_url(ok, &local).is_ok(), "{ok}");
        }
        assert!(check_callback_url("ftp://127.0.0.1/", &local).is_err());
    }

    #[test]
    fn public_addresses() {
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450::1"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "127.0.0.2",
            "100.127.255.255",
            "198.18.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:db8::1",
            "ff02::1",
            "::",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
