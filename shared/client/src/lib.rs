//! A typed client of the pricing API (shared/api/openapi.json, API version 3.1.0).
//!
//! - every route of the API as a method, with typed request and response bodies
//!   ([`types`]); each method checks the route's documented success status;
//! - every 4xx/5xx answer as [`Error::Api`] with the typed problem+json body ([`Problem`]:
//!   `type`, `title`, `status`, `detail`, `errors[]` of `pointer`, `code`, `message`);
//!   transport failures as [`Error::Transport`];
//! - 429 and 503 answers retried after their `Retry-After` (seconds or an HTTP date; capped,
//!   see [`RetryPolicy`]);
//! - authentication with a fixed bearer token, or client credentials: the client fetches a
//!   token from `/oauth2/token`, renews it before it expires and once more on a 401;
//! - [`webhooks::WebhookVerifier`]: verifies a received webhook's service signature
//!   (ECDSA P-256 with the published keys) and subscription signature (Standard Webhooks
//!   `v1` HMAC with the `whsec_` secret).
//!
//! ```no_run
//! use pricing_client::{Client, types::*};
//! use serde_json::json;
//!
//! # async fn run() -> pricing_client::Result<()> {
//! let api = Client::with_client_credentials("http://127.0.0.1:8080", "client-id", "secret")?;
//! api.create_project(&ProjectRequest::id("shop")).await?;
//! api.create_instance("shop", &InstanceRequest::id("gig")).await?;
//! // The item first (a sale of an unknown item is accepted, then rejected when applied).
//! let product = Entry::new("productRegistration", json!({"productId": "ga", "capacity": 100}));
//! let item = Entry::new("itemRegistration", json!({"itemId": "a", "productId": "ga",
//!     "salesPeriod": {"start": "2026-11-01T00:00:00Z", "end": "2027-07-01T00:00:00Z"},
//!     "priceSettings": {"min": 30, "max": 90, "default": 40}}));
//! let sale = Entry::new("itemSale", json!({"itemId": "a", "quantity": 1, "price": 40}));
//! let entries = EntrySubmission::new([product, item, sale]);
//! let summary = api.submit_entries("shop", "gig", &entries).await?;
//! assert_eq!(summary.accepted, 3);
//! let details = api.instance("shop", "gig").await?;
//! println!("applied up to {}", details.processing.applied_sequence);
//!
//! // A webhook receiver: both signatures, fresh Date and webhook-timestamp, the envelope.
//! # let (headers, body, whsec) = (reqwest::header::HeaderMap::new(), b"{}", "whsec_AAAA");
//! let secret = WebhookSecret::parse(whsec).expect("a whsec_ secret");
//! let verifier = api.webhook_verifier().await?.with_secret(secret);
//! let event = verifier.verify("POST", "/hooks/in", &headers, body)?;
//! println!("{:?} for instance {}", event.event_type, event.instance_id);
//! # Ok(()) }
//! ```
//!
//! The removed routes (`POST .../items`, `/publicKeys`, `/subprojects`: 410 Gone) have no
//! method.

pub mod error;
pub mod types;
pub mod webhooks;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;
use url::Url;

pub use error::{Error, FieldError, Problem, Result};
use types::*;
pub use webhooks::{VerifyError, WebhookVerifier};

/// The API version this client speaks (sent as `Api-Version`).
pub const API_VERSION: &str = pricing_core::API_VERSION;

/// How 429 and 503 answers are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: none).
    pub max_retries: u32,
    /// The wait when the answer has no usable `Retry-After`.
    pub default_wait: Duration,
    /// The longest wait; a longer `Retry-After` is cut to this.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            default_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(30),
        }
    }
}

/// Renew a token this long before it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

/// How the client authenticates at the token endpoint (RFC 6749 section 2.3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TokenAuth {
    /// `client_id` and `client_secret` in the form body (the standalone's documented way).
    #[default]
    Form,
    /// HTTP Basic (`client_id:client_secret`), as Amazon Cognito requires.
    Basic,
}

struct Credentials {
    token_url: Url,
    client_id: String,
    client_secret: String,
    token_auth: TokenAuth,
    cached: Mutex<Option<(String, Instant)>>,
}

enum Auth {
    None,
    Bearer(String),
    ClientCredentials(Credentials),
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    auth: Auth,
    retry: RetryPolicy,
}

/// The API client. Cheap to clone (shared connection pool and token).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base.as_str())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    base: String,
    auth: AuthSpec,
    retry: RetryPolicy,
    http: Option<reqwest::Client>,
    token_url: Option<String>,
    token_auth: TokenAuth,
}

enum AuthSpec {
    None,
    Bearer(String),
    ClientCredentials(String, String),
}

/// How long the default HTTP client keeps an idle connection: under the 30 s after which
/// the standalone service closes one (reqwest's own default, 90 s, would reuse connections
/// the service may be closing at that moment, and a request lost so is not retried).
pub const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl ClientBuilder {
    /// A fixed bearer token (no refresh).
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.auth = AuthSpec::Bearer(token.into());
        self
    }

    /// Client credentials, exchanged at the token URL (default `{base}/oauth2/token`).
    pub fn client_credentials(
        mut self,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        self.auth = AuthSpec::ClientCredentials(client_id.into(), client_secret.into());
        self
    }

    /// Where tokens come from (on AWS the Cognito domain's `/oauth2/token`).
    pub fn token_url(mut self, url: impl Into<String>) -> Self {
        self.token_url = Some(url.into());
        self
    }

    /// How the credentials travel to the token endpoint (default: in the form).
    pub fn token_auth(mut self, token_auth: TokenAuth) -> Self {
        self.token_auth = token_auth;
        self
    }

    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// A reqwest client of your own (timeouts, proxies, TLS roots). Keep its pool's idle
    /// timeout under the service's (the standalone closes an idle connection after 30 s,
    /// `--header-timeout`), as the default client does ([`POOL_IDLE_TIMEOUT`]).
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    pub fn build(self) -> Result<Client> {
        let base = parse_url(&self.base)?;
        let auth = match self.auth {
            AuthSpec::None => Auth::None,
            AuthSpec::Bearer(t) => Auth::Bearer(t),
            AuthSpec::ClientCredentials(client_id, client_secret) => {
                let token_url = match &self.token_url {
                    Some(u) => parse_url(u)?,
                    None => join(&base, &["oauth2", "token"]),
                };
                Auth::ClientCredentials(Credentials {
                    token_url,
                    client_id,
                    client_secret,
                    token_auth: self.token_auth,
                    cached: Mutex::new(None),
                })
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                http: match self.http {
                    Some(http) => http,
                    None => reqwest::Client::builder()
                        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                        .build()?,
                },
                base,
                auth,
                retry: self.retry,
            }),
        })
    }
}

fn parse_url(s: &str) -> Result<Url> {
    let url = Url::parse(s).map_err(|e| Error::Url(format!("{s}: {e}")))?;
    if url.cannot_be_a_base() {
        return Err(Error::Url(format!("{s}: not a base URL")));
    }
    Ok(url)
}

/// `base` with `segments` appended, each percent-encoded as one path segment.
fn join(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}

/// The wait a 429/503 asks for: `Retry-After` in seconds or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// Reads a token endpoint answer.
fn token_answer(status: StatusCode, body: &[u8]) -> Result<TokenResponse> {
    if status == StatusCode::OK {
        return serde_json::from_slice(body).map_err(|source| Error::Decode {
            status: status.as_u16(),
            body: String::from_utf8_lossy(body).into_owned(),
            source,
        });
    }
    match serde_json::from_slice::<OAuthError>(body) {
        Ok(error) => Err(Error::OAuth {
            status: status.as_u16(),
            error,
        }),
        Err(_) => Err(failure(status, body, 200)),
    }
}

/// An answer other than the expected one as an error: a problem when the body is one.
fn failure(status: StatusCode, body: &[u8], expected: u16) -> Error {
    if !status.is_success()
        && let Ok(problem) = serde_json::from_slice::<Problem>(body)
    {
        return Error::Api(Box::new(problem));
    }
    Error::UnexpectedStatus {
        expected,
        status: status.as_u16(),
        body: String::from_utf8_lossy(body).into_owned(),
    }
}

impl Client {
    /// A builder for the API at `base` (`http://127.0.0.1:8080`, or the API Gateway stage
    /// URL).
    pub fn builder(base: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base.into(),
            auth: AuthSpec::None,
            retry: RetryPolicy::default(),
            http: None,
            token_url: None,
            token_auth: TokenAuth::Form,
        }
    }

    /// A client sending a fixed bearer token.
    pub fn with_token(base: impl Into<String>, token: impl Into<String>) -> Result<Client> {
        Self::builder(base).bearer(token).build()
    }

    /// A client exchanging client credentials at `{base}/oauth2/token`.
    pub fn with_client_credentials(
        base: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Result<Client> {
        Self::builder(base)
            .client_credentials(client_id, client_secret)
            .build()
    }

    /// The base URL.
    pub fn base(&self) -> &Url {
        &self.inner.base
    }

    /// The same client with another fixed bearer token (other tenant), sharing the pool.
    pub fn with_bearer(&self, token: impl Into<String>) -> Client {
        Client {
            inner: Arc::new(Inner {
                http: self.inner.http.clone(),
                base: self.inner.base.clone(),
                auth: Auth::Bearer(token.into()),
                retry: self.inner.retry,
            }),
        }
    }

    /// `POST /oauth2/token` with the client-credentials grant, without caching.
    pub async fn request_token(
        &self,
        token_url: &str,
        client_id: &str,
        client_secret: &str,
        token_auth: TokenAuth,
    ) -> Result<TokenResponse> {
        self.fetch_token(&parse_url(token_url)?, client_id, client_secret, token_auth)
            .await
    }

    async fn fetch_token(
        &self,
        url: &Url,
        client_id: &str,
        client_secret: &str,
        token_auth: TokenAuth,
    ) -> Result<TokenResponse> {
        // Built before any await: the serializer is not Send.
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if token_auth == TokenAuth::Form {
                form.append_pair("client_id", client_id)
                    .append_pair("client_secret", client_secret);
            }
            form.finish()
        };
        let mut req = self
            .inner
            .http
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("api-version", API_VERSION)
            .body(form);
        if token_auth == TokenAuth::Basic {
            req = req.basic_auth(client_id, Some(client_secret));
        }
        let resp = req.send().await?;
        let status = resp.status();
        let body = resp.bytes().await?;
        token_answer(status, &body)
    }

    /// The bearer token to send, fetching or renewing one when `renew` or when it expires.
    async fn bearer(&self, renew: bool) -> Result<Option<String>> {
        match &self.inner.auth {
            Auth::None => Ok(None),
            Auth::Bearer(t) => Ok(Some(t.clone())),
            Auth::ClientCredentials(c) => {
                let mut cached = c.cached.lock().await;
                if let Some((token, expires)) = cached.as_ref()
                    && !renew
                    && Instant::now() + TOKEN_MARGIN < *expires
                {
                    return Ok(Some(token.clone()));
                }
                let t = self
                    .fetch_token(&c.token_url, &c.client_id, &c.client_secret, c.token_auth)
                    .await?;
                let expires = Instant::now() + Duration::from_secs(t.expires_in);
                *cached = Some((t.access_token.clone(), expires));
                Ok(Some(t.access_token))
            }
        }
    }

    /// Sends a request with retries and token renewal; the final status, headers and body.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut retries = 0;
        let mut renewed = false;
        let mut renew = false;
        loop {
            let mut req = self
                .inner
                .http
                .request(method.clone(), url.clone())
                .header("api-version", API_VERSION);
            if let Some(token) = self.bearer(renew).await? {
                req = req.bearer_auth(token);
            }
            renew = false;
            if let Some(b) = &body {
                req = req
                    .header("content-type", "application/json")
                    .body(b.clone());
            }
            let resp = req.send().await?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED
                && !renewed
                && matches!(self.inner.auth, Auth::ClientCredentials(_))
            {
                // The token may have been revoked or the signing secret changed: one
                // fresh token, then the 401 stands.
                renewed = true;
                renew = true;
                continue;
            }
            if (status == StatusCode::TOO_MANY_REQUESTS
                || status == StatusCode::SERVICE_UNAVAILABLE)
                && retries < self.inner.retry.max_retries
            {
                let policy = self.inner.retry;
                let wait = retry_after(resp.headers())
                    .unwrap_or(policy.default_wait)
                    .min(policy.max_wait);
                retries += 1;
                tokio::time::sleep(wait).await;
                continue;
            }
            let bytes = resp.bytes().await?;
            return Ok((status, bytes.to_vec()));
        }
    }

    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&B>,
        expected: StatusCode,
    ) -> Result<T> {
        let (status, bytes) = self.raw(method, segments, query, body).await?;
        if status != expected {
            return Err(failure(status, &bytes, expected.as_u16()));
        }
        let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
        serde_json::from_slice(bytes).map_err(|source| Error::Decode {
            status: status.as_u16(),
            body: String::from_utf8_lossy(bytes).into_owned(),
            source,
        })
    }

    /// Any request on the API (authenticated, retried): the status and the raw body. For
    /// what the typed methods cannot send, such as deliberately malformed bodies.
    pub async fn raw<B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut url = join(&self.inner.base, segments);
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|source| Error::Decode {
                status: 0,
                body: String::new(),
                source,
            })?;
        self.exchange(method, url, body).await
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T> {
        self.call::<(), T>(Method::GET, segments, query, None, StatusCode::OK)
            .await
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: Option<&B>,
        expected: StatusCode,
    ) -> Result<T> {
        self.call(Method::POST, segments, &[], body, expected).await
    }

    async fn delete(&self, segments: &[&str]) -> Result<()> {
        self.call::<(), ()>(Method::DELETE, segments, &[], None, StatusCode::NO_CONTENT)
            .await
    }

    // --- System --------------------------------------------------------------------------

    /// `GET /health`.
    pub async fn health(&self) -> Result<Health> {
        self.get(&["health"], &[]).await
    }

    /// `GET /openapi.json`: the OpenAPI document.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        self.get(&["openapi.json"], &[]).await
    }

    /// `GET /webhooks/signatureVerificationKeys`: the published service keys.
    pub async fn signature_verification_keys(&self) -> Result<JwkSet> {
        self.get(&["webhooks", "signatureVerificationKeys"], &[])
            .await
    }

    /// A [`WebhookVerifier`] with the currently published keys.
    pub async fn webhook_verifier(&self) -> Result<WebhookVerifier> {
        let keys = self.signature_verification_keys().await?;
        Ok(WebhookVerifier::new(&keys)?)
    }

    /// `POST /webhooks/errors` (202): a receiver reports a webhook it could not process.
    pub async fn report_webhook_error(&self, report: &ErrorReport) -> Result<ErrorReportAccepted> {
        self.post(&["webhooks", "errors"], Some(report), StatusCode::ACCEPTED)
            .await
    }

    // --- Projects and instances ----------------------------------------------------------

    /// `POST /projects` (201).
    pub async fn create_project(&self, request: &ProjectRequest) -> Result<Project> {
        self.post(&["projects"], Some(request), StatusCode::CREATED)
            .await
    }

    /// `GET /projects`.
    pub async fn projects(&self, page: &PageQuery) -> Result<Page<Project>> {
        self.get(&["projects"], &page.pairs()).await
    }

    /// `GET /projects/{projectId}`.
    pub async fn project(&self, project: &str) -> Result<Project> {
        self.get(&["projects", project], &[]).await
    }

    /// `POST /projects/{projectId}/instances` (201).
    pub async fn create_instance(
        &self,
        project: &str,
        request: &InstanceRequest,
    ) -> Result<Instance> {
        self.post(
            &["projects", project, "instances"],
            Some(request),
            StatusCode::CREATED,
        )
        .await
    }

    /// `GET /projects/{projectId}/instances`.
    pub async fn instances(&self, project: &str, page: &PageQuery) -> Result<Page<Instance>> {
        self.get(&["projects", project, "instances"], &page.pairs())
            .await
    }

    /// `GET /projects/{projectId}/instances/{instanceId}`.
    pub async fn instance(&self, project: &str, instance: &str) -> Result<InstanceDetails> {
        self.get(&["projects", project, "instances", instance], &[])
            .await
    }

    /// `PUT /projects/{projectId}/instances/{instanceId}`.
    pub async fn update_instance(
        &self,
        project: &str,
        instance: &str,
        update: &InstanceUpdate,
    ) -> Result<Instance> {
        self.call(
            Method::PUT,
            &["projects", project, "instances", instance],
            &[],
            Some(update),
            StatusCode::OK,
        )
        .await
    }

    /// `GET .../items` (optionally of one product).
    pub async fn items(
        &self,
        project: &str,
        instance: &str,
        product: Option<&str>,
        page: &PageQuery,
    ) -> Result<Page<ItemSummary>> {
        let mut query = page.pairs();
        if let Some(p) = product {
            query.push(("productId", p.to_owned()));
        }
        self.get(
            &["projects", project, "instances", instance, "items"],
            &query,
        )
        .await
    }

    /// `GET .../items/{itemId}`.
    pub async fn item(&self, project: &str, instance: &str, item: &str) -> Result<ItemDetails> {
        self.get(
            &["projects", project, "instances", instance, "items", item],
            &[],
        )
        .await
    }

    /// `GET .../products`.
    pub async fn products(
        &self,
        project: &str,
        instance: &str,
        page: &PageQuery,
    ) -> Result<Page<ProductSummary>> {
        self.get(
            &["projects", project, "instances", instance, "products"],
            &page.pairs(),
        )
        .await
    }

    /// `GET .../products/{productId}`.
    pub async fn product(
        &self,
        project: &str,
        instance: &str,
        product: &str,
    ) -> Result<ProductDetails> {
        self.get(
            &[
                "projects",
                project,
                "instances",
                instance,
                "products",
                product,
            ],
            &[],
        )
        .await
    }

    // --- Entries and events --------------------------------------------------------------

    /// `POST .../entries`: appends the entries (all or none); duplicates by transaction id
    /// are acknowledged without being appended again.
    pub async fn submit_entries(
        &self,
        project: &str,
        instance: &str,
        submission: &EntrySubmission,
    ) -> Result<SubmitSummary> {
        self.post(
            &["projects", project, "instances", instance, "entries"],
            Some(submission),
            StatusCode::OK,
        )
        .await
    }

    /// `GET .../entries`: the entry log, in sequence order.
    pub async fn entries(
        &self,
        project: &str,
        instance: &str,
        query: &LogQuery,
    ) -> Result<Page<LogRecord>> {
        let mut pairs = query.page.pairs();
        if let Some(a) = query.after {
            pairs.push(("after", a.to_string()));
        }
        self.get(
            &["projects", project, "instances", instance, "entries"],
            &pairs,
        )
        .await
    }

    /// `GET .../events`: the instance's events (rejections, price updates, deactivation).
    pub async fn events(
        &self,
        project: &str,
        instance: &str,
        query: &EventQuery,
    ) -> Result<Page<Event>> {
        let mut pairs = query.page.pairs();
        if let Some(t) = query.event_type {
            pairs.push(("type", t.as_str().to_owned()));
        }
        if let Some(s) = &query.since {
            pairs.push(("since", s.clone()));
        }
        if let Some(u) = &query.until {
            pairs.push(("until", u.clone()));
        }
        self.get(
            &["projects", project, "instances", instance, "events"],
            &pairs,
        )
        .await
    }

    // --- Prices --------------------------------------------------------------------------

    /// `POST /projects/{projectId}/calculatePrices` (202).
    pub async fn calculate_prices(
        &self,
        project: &str,
        request: &CalculationRequest,
    ) -> Result<Calculations> {
        self.post(
            &["projects", project, "calculatePrices"],
            Some(request),
            StatusCode::ACCEPTED,
        )
        .await
    }

    /// `GET /projects/{projectId}/instancePrices` (optionally of one instance).
    pub async fn instance_prices(
        &self,
        project: &str,
        instance: Option<&str>,
        page: &PageQuery,
    ) -> Result<Page<InstancePrices>> {
        let mut query = page.pairs();
        if let Some(i) = instance {
            query.push(("instanceId", i.to_owned()));
        }
        self.get(&["projects", project, "instancePrices"], &query)
            .await
    }

    /// `GET .../items/{itemId}/priceHistory`.
    pub async fn price_history(
        &self,
        project: &str,
        instance: &str,
        item: &str,
        page: &PageQuery,
    ) -> Result<Page<PriceHistoryEntry>> {
        self.get(
            &[
                "projects",
                project,
                "instances",
                instance,
                "items",
                item,
                "priceHistory",
            ],
            &page.pairs(),
        )
        .await
    }

    /// `GET .../priceMatches`.
    pub async fn price_matches(&self, project: &str, instance: &str) -> Result<Page<PriceMatch>> {
        self.get(
            &["projects", project, "instances", instance, "priceMatches"],
            &[],
        )
        .await
    }

    /// `POST .../priceMatches` (201).
    pub async fn create_price_match(
        &self,
        project: &str,
        instance: &str,
        request: &PriceMatchRequest,
    ) -> Result<PriceMatch> {
        self.post(
            &["projects", project, "instances", instance, "priceMatches"],
            Some(request),
            StatusCode::CREATED,
        )
        .await
    }

    /// `DELETE .../priceMatches/{matchId}` (204).
    pub async fn delete_price_match(
        &self,
        project: &str,
        instance: &str,
        match_id: &str,
    ) -> Result<()> {
        self.delete(&[
            "projects",
            project,
            "instances",
            instance,
            "priceMatches",
            match_id,
        ])
        .await
    }

    // --- Subscriptions -------------------------------------------------------------------

    /// `GET /projects/{projectId}/subscriptions`.
    pub async fn subscriptions(&self, project: &str) -> Result<Page<Subscription>> {
        self.get(&["projects", project, "subscriptions"], &[]).await
    }

    /// `POST /projects/{projectId}/subscriptions` (201): a project-wide subscription; the
    /// answer carries its secret, shown this once.
    pub async fn create_subscription(
        &self,
        project: &str,
        request: &SubscriptionRequest,
    ) -> Result<SubscriptionCreated> {
        self.post(
            &["projects", project, "subscriptions"],
            Some(request),
            StatusCode::CREATED,
        )
        .await
    }

    /// `GET .../instances/{instanceId}/subscriptions`.
    pub async fn instance_subscriptions(
        &self,
        project: &str,
        instance: &str,
    ) -> Result<Page<Subscription>> {
        self.get(
            &["projects", project, "instances", instance, "subscriptions"],
            &[],
        )
        .await
    }

    /// `POST .../instances/{instanceId}/subscriptions` (201).
    pub async fn create_instance_subscription(
        &self,
        project: &str,
        instance: &str,
        request: &SubscriptionRequest,
    ) -> Result<SubscriptionCreated> {
        self.post(
            &["projects", project, "instances", instance, "subscriptions"],
            Some(request),
            StatusCode::CREATED,
        )
        .await
    }

    /// `DELETE /projects/{projectId}/subscriptions/{subscriptionId}` (204).
    pub async fn delete_subscription(&self, project: &str, subscription: &str) -> Result<()> {
        self.delete(&["projects", project, "subscriptions", subscription])
            .await
    }

    /// `POST .../subscriptions/{subscriptionId}/trigger` (202): resend the latest events.
    pub async fn trigger_subscription(
        &self,
        project: &str,
        subscription: &str,
    ) -> Result<Triggered> {
        self.post::<(), _>(
            &[
                "projects",
                project,
                "subscriptions",
                subscription,
                "trigger",
            ],
            None,
            StatusCode::ACCEPTED,
        )
        .await
    }

    /// `POST .../subscriptions/{subscriptionId}/secret`: a new secret (the old one signs
    /// too until `previousSecretExpiresAt`).
    pub async fn rotate_subscription_secret(
        &self,
        project: &str,
        subscription: &str,
    ) -> Result<SecretRotated> {
        self.post::<(), _>(
            &["projects", project, "subscriptions", subscription, "secret"],
            None,
            StatusCode::OK,
        )
        .await
    }

    /// `GET .../subscriptions/{subscriptionId}/deliveries`.
    pub async fn deliveries(
        &self,
        project: &str,
        subscription: &str,
        page: &PageQuery,
    ) -> Result<Page<Delivery>> {
        self.get(
            &[
                "projects",
                project,
                "subscriptions",
                subscription,
                "deliveries",
            ],
            &page.pairs(),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, value.parse().expect("a header value"));
        h
    }

    #[test]
    fn retry_after_is_read_in_seconds_or_as_an_http_date() {
        assert_eq!(retry_after(&headers("7")), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let wait = retry_after(&headers(&httpdate::fmt_http_date(later))).expect("a date");
        assert!(wait > Duration::from_secs(60) && wait <= Duration::from_secs(120));
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(60));
        assert_eq!(retry_after(&headers(&past)), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers("soon")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    fn send<T: Send>(_: T) {}

    /// The calls can run on spawned tasks (their futures are Send).
    #[test]
    fn futures_are_send() {
        let api = Client::with_client_credentials("http://h", "id", "secret").expect("a client");
        send(api.project("p"));
        send(api.submit_entries("p", "i", &EntrySubmission::default()));
        send(api.webhook_verifier());
        send(api.request_token("http://h/t", "id", "s", TokenAuth::Basic));
    }

    #[test]
    fn ids_are_single_path_segments() {
        let base = Url::parse("http://h/api/").expect("a URL");
        let url = join(&base, &["projects", "a/b c", "instances"]);
        assert_eq!(url.as_str(), "http://h/api/projects/a%2Fb%20c/instances");
    }
}
