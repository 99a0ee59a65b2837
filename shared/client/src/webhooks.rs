//! Verifying a received webhook under both of its signatures (docs/webhooks.md):
//!
//! - the service's: `x-signature-secp256r1-sha256` is the hex DER ECDSA P-256 SHA-256
//!   signature over method + path-with-query + `Date` + body (no separators) by the
//!   published key named in `x-signature-key-id` (`GET /webhooks/signatureVerificationKeys`);
//! - the subscription's (Standard Webhooks `v1`): `webhook-signature` holds one or more
//!   `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">` under the
//!   subscription's `whsec_` secret. Only this one says the webhook was meant for you.
//!
//! Both `Date` and `webhook-timestamp` must be within the tolerance (5 minutes by default)
//! of now, so that a captured webhook cannot be replayed later.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pricing_core::jws::{KEY_PROPAGATION, KeyStatus};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::sign::{
    KEY_ID_HEADER, SIGNATURE_HEADER, WEBHOOK_ID_HEADER, WEBHOOK_TIMESTAMP_HEADER,
};
use pricing_core::webhooks::{WebhookSecret, signing_input};
use reqwest::header::HeaderMap;

use crate::types::{JwkSet, WebhookEnvelope};

/// The subscription signature's header.
pub const SUBSCRIPTION_SIGNATURE_HEADER: &str = pricing_core::webhooks::secret::SIGNATURE_HEADER;
pub use pricing_core::webhooks::sign::{
    KEY_ID_HEADER as SERVICE_KEY_ID_HEADER, SIGNATURE_HEADER as SERVICE_SIGNATURE_HEADER,
};

/// How far `Date` and `webhook-timestamp` may be from now by default.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// Why a webhook is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("missing or unreadable header {0}")]
    MissingHeader(&'static str),
    #[error("published key {0} is not a P-256 key")]
    BadKey(String),
    #[error("no published key {0}")]
    UnknownKey(String),
    #[error("key {0} had retired and no longer signed when this webhook is dated")]
    RetiredKey(String),
    #[error("the service signature does not verify")]
    ServiceSignature,
    #[error("no webhook-signature verifies under the subscription's secrets")]
    SubscriptionSignature,
    #[error("{0} is too far from now (replay?)")]
    Stale(&'static str),
    #[error("the body is not a webhook envelope: {0}")]
    Body(String),
}

/// Verifies webhooks with the published service keys and, when given, the subscription's
/// secrets (during a rotation give the new and the old one).
#[derive(Debug, Clone)]
pub struct WebhookVerifier {
    /// Each key's kid, point, and the last moment it signed (retired keys).
    keys: Vec<(String, Vec<u8>, Option<SystemTime>)>,
    secrets: Vec<WebhookSecret>,
    tolerance: Option<Duration>,
}

impl WebhookVerifier {
    /// A verifier of the service signature with the published `keys`.
    pub fn new(keys: &JwkSet) -> Result<Self, VerifyError> {
        let keys = keys
            .keys
            .iter()
            .map(|k| {
                let coordinate = |c: &str| {
                    URL_SAFE_NO_PAD
                        .decode(c)
                        .ok()
                        .filter(|b| b.len() == 32)
                        .ok_or_else(|| VerifyError::BadKey(k.kid.clone()))
                };
                if k.kty != "EC" || k.crv != "P-256" {
                    return Err(VerifyError::BadKey(k.kid.clone()));
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend(coordinate(&k.x)?);
                point.extend(coordinate(&k.y)?);
                // A retired key stays listed (the log's entries it signed still verify)
                // but signs nothing KEY_PROPAGATION after it retired.
                let last_signed = match (k.status, &k.retired_at) {
                    (KeyStatus::Retired, Some(at)) => Some(
                        Timestamp::parse(at)
                            .and_then(|at| u64::try_from(at.millis()).ok())
                            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms) + KEY_PROPAGATION)
                            .ok_or_else(|| VerifyError::BadKey(k.kid.clone()))?,
                    ),
                    _ => None,
                };
                Ok((k.kid.clone(), point, last_signed))
            })
            .collect::<Result<_, _>>()?;
        Ok(WebhookVerifier {
            keys,
            secrets: Vec::new(),
            tolerance: Some(DEFAULT_TOLERANCE),
        })
    }

    /// Also require the subscription signature under `secret` (any one of those given).
    pub fn with_secret(mut self, secret: WebhookSecret) -> Self {
        self.secrets.push(secret);
        self
    }

    /// The allowed distance of `Date` and `webhook-timestamp` from now; `None` checks
    /// neither (tests replaying stored webhooks).
    pub fn with_tolerance(mut self, tolerance: Option<Duration>) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Verifies a webhook received as `method` on `path_with_query` (`/hooks/in?x=1`, as
    /// the callback URL has it): the service signature, the subscription signature when a
    /// secret is set, the times; then reads the envelope.
    pub fn verify(
        &self,
        method: &str,
        path_with_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookEnvelope, VerifyError> {
        self.verify_at(method, path_with_query, headers, body, SystemTime::now())
    }

    /// [`Self::verify`] at `now`.
    pub fn verify_at(
        &self,
        method: &str,
        path_with_query: &str,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<WebhookEnvelope, VerifyError> {
        self.verify_service_signature(method, path_with_query, headers, body)?;
        if !self.secrets.is_empty() {
            self.verify_subscription_signature(headers, body)?;
        }
        if let Some(tolerance) = self.tolerance {
            let date = httpdate::parse_http_date(header(headers, "date")?)
                .map_err(|_| VerifyError::MissingHeader("date"))?;
            if distance(date, now) > tolerance {
                return Err(VerifyError::Stale("date"));
            }
            let ts = timestamp(headers)?;
            let sent = UNIX_EPOCH + Duration::from_secs(ts.max(0).unsigned_abs());
            if distance(sent, now) > tolerance {
                return Err(VerifyError::Stale(WEBHOOK_TIMESTAMP_HEADER));
            }
        }
        serde_json::from_slice(body).map_err(|e| VerifyError::Body(e.to_string()))
    }

    /// Only the service signature: ECDSA P-256 over method + path-with-query + Date + body.
    pub fn verify_service_signature(
        &self,
        method: &str,
        path_with_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        let kid = header(headers, KEY_ID_HEADER)?;
        let signature = decode_hex(header(headers, SIGNATURE_HEADER)?)
            .ok_or(VerifyError::MissingHeader(SIGNATURE_HEADER))?;
        let date = header(headers, "date")?;
        let message = signing_input(method, path_with_query, date, body);
        let mut candidates = self.keys.iter().filter(|(k, _, _)| k == kid).peekable();
        if candidates.peek().is_none() {
            return Err(VerifyError::UnknownKey(kid.to_owned()));
        }
        // `Date` is signed: a retired key's signature dated after it stopped signing is
        // not the service's (the key may have leaked since). A minute's slack for clocks.
        let dated = httpdate::parse_http_date(date).ok();
        let signed_then = |last: &Option<SystemTime>| match (last, dated) {
            (Some(last), Some(dated)) => dated <= *last + Duration::from_secs(60),
            (Some(_), None) => false,
            (None, _) => true,
        };
        let mut candidates = candidates
            .filter(|(_, _, last)| signed_then(last))
            .peekable();
        if candidates.peek().is_none() {
            return Err(VerifyError::RetiredKey(kid.to_owned()));
        }
        candidates
            .any(|(_, point, _)| {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
                    .verify(&message, &signature)
                    .is_ok()
            })
            .then_some(())
            .ok_or(VerifyError::ServiceSignature)
    }

    /// Only the subscription signature (Standard Webhooks `v1`) under the secrets given.
    pub fn verify_subscription_signature(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        verify_subscription_signature(&self.secrets, headers, body)
    }
}

/// Whether `webhook-signature` verifies under any of `secrets` over `webhook-id`,
/// `webhook-timestamp` and `body` (no time check).
pub fn verify_subscription_signature(
    secrets: &[WebhookSecret],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let signature = header(headers, SUBSCRIPTION_SIGNATURE_HEADER)?;
    let id = header(headers, WEBHOOK_ID_HEADER)?;
    let ts = timestamp(headers)?;
    secrets
        .iter()
        .any(|s| s.verifies(signature, id, ts, body))
        .then_some(())
        .ok_or(VerifyError::SubscriptionSignature)
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .ok_or(VerifyError::MissingHeader(name))
}

fn timestamp(headers: &HeaderMap) -> Result<i64, VerifyError> {
    header(headers, WEBHOOK_TIMESTAMP_HEADER)?
        .trim()
        .parse()
        .map_err(|_| VerifyError::MissingHeader(WEBHOOK_TIMESTAMP_HEADER))
}

fn distance(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or_default()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
