//! The webhook transport (DESIGN.md section 7): one POST per attempt over reqwest and
//! rustls, 15 s in all, redirects not followed, connections kept alive and reused per host.
//!
//! The callback policy is enforced on the addresses the request connects to, not only on
//! the URL: names are resolved by a resolver that refuses a name when any of its addresses
//! is not allowed (DNS rebinding) and hands reqwest exactly the addresses it checked
//! (pinning). IP literals never reach a resolver, so `post` checks them itself, and it
//! re-checks every URL against the policy: a subscription registered under a looser policy
//! does not get past a strict one.
//!
//! Responses count by their status (and Retry-After); bodies are read up to
//! [`MAX_BODY`] bytes, so the connection can be reused, and thrown away unlogged.

mod resolve;

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pricing_core::ports::{WebhookRequest, WebhookTransport};
use pricing_core::webhooks::delivery::Response;
use pricing_core::webhooks::{CallbackPolicy, DestinationPlaces, Place, check_callback_url};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use url::Host;

use crate::resolve::{Lookup, PolicyResolver, ResolveError, system_lookup};

/// A whole attempt, from connecting to the end of the response body.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// Resolving, connecting and the TLS handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a response body that is read (then discarded); a larger body closes the
/// connection instead of returning it to the pool.
pub const MAX_BODY: usize = 64 * 1024;
/// How long an idle pooled connection is kept.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
pub const USER_AGENT: &str = concat!("dynamic-pricing-webhooks/", env!("CARGO_PKG_VERSION"));

/// The HTTP client could not be built (the TLS backend failed to initialize).
#[derive(Debug, thiserror::Error)]
#[error("building the webhook HTTP client: {0}")]
pub struct BuildError(#[source] reqwest::Error);

/// Sends webhooks with reqwest. Cheap to clone: clones share the connection pool.
#[derive(Clone, Debug)]
pub struct HttpTransport {
    client: reqwest::Client,
    policy: CallbackPolicy,
    timeout: Duration,
    connect_timeout: Duration,
    /// Attempts in flight per destination, when limited ([`HttpTransportBuilder::places`]).
    places: Option<Arc<DestinationPlaces>>,
}

impl HttpTransport {
    /// The production transport: [`TIMEOUT`], [`CONNECT_TIMEOUT`], the system resolver.
    pub fn new(policy: CallbackPolicy) -> Result<Self, BuildError> {
        Self::builder(policy).build()
    }

    /// For tests and benchmarks: other timeouts, or a simulated resolver.
    pub fn builder(policy: CallbackPolicy) -> HttpTransportBuilder {
        HttpTransportBuilder {
            policy,
            timeout: TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            lookup: None,
            places: None,
        }
    }

    pub fn policy(&self) -> CallbackPolicy {
        self.policy
    }

    async fn send(&self, request: WebhookRequest) -> Response {
        let url = match check_callback_url(&request.url, &self.policy) {
            Ok(url) => url,
            Err(why) => return Response::Error(format!("callback URL refused: {why}")),
        };
        // IP literals bypass the resolver. check_callback_url has checked them; this keeps
        // the guarantee here, next to the client that relies on it.
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal.filter(|ip| !self.policy.allows_address(*ip)) {
            return Response::Error(format!("refused: {ip} is not a public address"));
        }
        let headers = match header_map(request.headers) {
            Ok(headers) => headers,
            Err(why) => return Response::Error(why),
        };
        let host = url.host_str().unwrap_or_default().to_owned();
        let started = Instant::now();
        let sent = self
            .client
            .post(url.as_str())
            .headers(headers)
            .body(request.body)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(err) => {
                let why = self.describe(&err);
                tracing::debug!(%host, error = %why, "webhook POST failed");
                return Response::Error(why);
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        discard_body(&mut response).await;
        tracing::debug!(
            %host,
            status,
            ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "webhook POST"
        );
        Response::Status {
            status,
            retry_after,
        }
    }

    /// A short message for an attempt that got no response.
    fn describe(&self, err: &reqwest::Error) -> String {
        if let Some(resolve) = find::<ResolveError>(err) {
            return resolve.to_string();
        }
        if err.is_timeout() {
            return if err.is_connect() {
                format!("connect timed out after {:?}", self.connect_timeout)
            } else {
                format!("timed out after {:?}", self.timeout)
            };
        }
        if let Some(tls) = find::<rustls::Error>(err) {
            return format!("TLS: {tls}");
        }
        if let Some(io) = find::<io::Error>(err) {
            match io.kind() {
                io::ErrorKind::ConnectionRefused => return "connection refused".into(),
                io::ErrorKind::ConnectionReset => return "connection reset".into(),
                io::ErrorKind::ConnectionAborted => return "connection aborted".into(),
                _ => {}
            }
        }
        // The innermost cause says most (reqwest's own message repeats the URL).
        let mut cause: &dyn StdError = err;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        let prefix = if err.is_connect() { "connect: " } else { "" };
        format!("{prefix}{cause}")
    }
}

impl WebhookTransport for HttpTransport {
    fn post(&self, request: WebhookRequest) -> impl Future<Output = Response> + Send {
        self.send(request)
    }

    fn take_place(&self, destination: &str, tenant: &str) -> Option<Place> {
        match &self.places {
            Some(places) => places.take(destination, tenant),
            None => Some(Place::unlimited()),
        }
    }
}

/// Configures an [`HttpTransport`].
pub struct HttpTransportBuilder {
    policy: CallbackPolicy,
    timeout: Duration,
    connect_timeout: Duration,
    lookup: Option<Lookup>,
    places: Option<usize>,
}

impl HttpTransportBuilder {
    /// The whole attempt's deadline (default [`TIMEOUT`]); the connect timeout is capped
    /// by it.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Resolving, connecting and the TLS handshake (default [`CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Replaces the system resolver: `lookup(host)` gives the host's addresses, which the
    /// policy then checks. Tests use it to make a public-looking name resolve anywhere.
    pub fn lookup<F, Fut>(mut self, lookup: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<Vec<IpAddr>>> + Send + 'static,
    {
        self.lookup = Some(Arc::new(move |host: String| Box::pin(lookup(host)) as _));
        self
    }

    /// At most `per_destination` attempts in flight to one slow destination (a callback
    /// URL's origin), and to one tenant's slow destinations together; more are not made
    /// now (`pricing_core::webhooks::places`). Default: no limit (on AWS an invocation
    /// takes at most 10 messages, and the function's concurrency is the pool).
    pub fn places(mut self, per_destination: usize) -> Self {
        self.places = Some(per_destination);
        self
    }

    pub fn build(self) -> Result<HttpTransport, BuildError> {
        let connect_timeout = self.connect_timeout.min(self.timeout);
        let resolver = PolicyResolver {
            policy: self.policy,
            lookup: self.lookup.unwrap_or_else(system_lookup),
        };
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(self.timeout)
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the name itself, past the policy.
            .no_proxy()
            .https_only(!self.policy.allow_http)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .dns_resolver(Arc::new(resolver))
            .build()
            .map_err(BuildError)?;
        Ok(HttpTransport {
            client,
            policy: self.policy,
            timeout: self.timeout,
            connect_timeout,
            places: self.places.map(DestinationPlaces::new),
        })
    }
}

fn header_map(headers: Vec<(&'static str, String)>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let key = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name {name}"))?;
        let value =
            HeaderValue::try_from(value).map_err(|_| format!("invalid value for header {name}"))?;
        map.append(key, value);
    }
    Ok(map)
}

/// Reads the body (stopping once past [`MAX_BODY`] bytes) and drops it; a body read to
/// its end lets the connection go back to the pool.
async fn discard_body(response: &mut reqwest::Response) {
    if response
        .content_length()
        .is_some_and(|len| len > MAX_BODY as u64)
    {
        return;
    }
    let mut read = 0;
    while read <= MAX_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) => return,
            // The status is the answer; a broken body only costs the connection.
            Err(err) => {
                tracing::debug!(error = %err.without_url(), "reading a webhook response body");
                return;
            }
        }
    }
}

/// The first `E` in `err`'s chain of causes.
fn find<'a, E: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<E>() {
            return Some(found);
        }
        // An io::Error's source() skips the error it wraps (rustls's, for one).
        if let Some(inner) = current
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
        {
            let inner: &(dyn StdError + 'static) = inner;
            if let Some(found) = find::<E>(inner) {
                return Some(found);
            }
        }
        cause = current.source();
    }
    None
}
