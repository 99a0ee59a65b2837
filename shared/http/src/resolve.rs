//! Name resolution under the callback policy: a name is refused when any of its addresses
//! is not allowed (one public and one private address could be rebound between two
//! lookups), and reqwest connects to exactly the addresses that were checked.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use pricing_core::webhooks::CallbackPolicy;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A name lookup's result: the host's addresses.
pub(crate) type LookupFuture = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Resolves a host name (no port) to its addresses.
pub(crate) type Lookup = Arc<dyn Fn(String) -> LookupFuture + Send + Sync>;

/// The system resolver (getaddrinfo on tokio's blocking pool).
pub(crate) fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|addr| addr.ip()).collect())
        })
    })
}

/// Why a name gave nothing to connect to.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error("could not resolve {host}: {source}")]
    Lookup {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("{host} resolves to no address")]
    Empty { host: String },
    #[error("refused: {host} resolves to {ip}, which is not a public address")]
    Refused { host: String, ip: IpAddr },
}

/// reqwest's resolver: looks a name up and checks every address against the policy.
pub(crate) struct PolicyResolver {
    pub(crate) policy: CallbackPolicy,
    pub(crate) lookup: Lookup,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let lookup = Arc::clone(&self.lookup);
        let policy = self.policy;
        Box::pin(async move {
            let found = match lookup(host.clone()).await {
                Ok(found) => found,
                Err(source) => return Err(ResolveError::Lookup { host, source }.into()),
            };
            let ips = checked(host, found, &policy)?;
            // Port 0: reqwest puts the URL's (or the scheme's) port in.
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// The addresses to connect to, once each, in the order found; an error when there are
/// none or any of them is not allowed.
pub(crate) fn checked(
    host: String,
    found: Vec<IpAddr>,
    policy: &CallbackPolicy,
) -> Result<Vec<IpAddr>, ResolveError> {
    if let Some(&ip) = found.iter().find(|ip| !policy.allows_address(**ip)) {
        return Err(ResolveError::Refused { host, ip });
    }
    let mut ips: Vec<IpAddr> = Vec::with_capacity(found.len());
    for ip in found {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if ips.is_empty() {
        return Err(ResolveError::Empty { host });
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    #[test]
    fn strict_policy_refuses_a_name_with_any_private_address() {
        let strict = CallbackPolicy::STRICT;
        let public = vec![ip("93.184.216.34"), ip("2606:2800:220:1::1")];
        assert_eq!(
            checked("a.example".into(), public.clone(), &strict).expect("public"),
            public
        );
        for bad in [
            "127.0.0.1",
            "10.0.0.1",
            "169.254.169.254",
            "::ffff:127.0.0.1",
            "::1",
        ] {
            let mixed = vec![ip("93.184.216.34"), ip(bad)];
            let err = checked("a.example".into(), mixed, &strict).expect_err(bad);
            assert!(
                matches!(err, ResolveError::Refused { ip: refused, .. } if refused == ip(bad)),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn local_policy_takes_private_addresses_and_duplicates_go() {
        let found = vec![ip("127.0.0.1"), ip("10.0.0.1"), ip("127.0.0.1")];
        assert_eq!(
            checked("db".into(), found, &CallbackPolicy::LOCAL).expect("local"),
            vec![ip("127.0.0.1"), ip("10.0.0.1")]
        );
    }

    #[test]
    fn no_address_is_an_error() {
        let err =
            checked("gone.example".into(), vec![], &CallbackPolicy::LOCAL).expect_err("no address");
        assert_eq!(err.to_string(), "gone.example resolves to no address");
    }
}
