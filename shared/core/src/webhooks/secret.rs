//! Per-subscription signing secrets and the Standard Webhooks signature
//! (<https://www.standardwebhooks.com>, symmetric `v1`).
//!
//! One P-256 key signs every tenant's webhooks (`x-signature-secp256r1-sha256`), so that
//! signature says "the service sent this", not "the service sent this to you": a tenant
//! could pass a genuinely signed webhook of its own on to another tenant's receiver. Each
//! subscription therefore also has a secret of its own, shown to its owner once (at
//! creation and at each rotation), and every delivery carries
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`
//! under it. A webhook meant for one subscription does not verify under another's secret.
//!
//! A secret is 32 random bytes, written `whsec_<base64>`; the HMAC key is the decoded bytes.
//! After a rotation the replaced secret signs too (a second, space-separated `v1`
//! signature) for [`ROTATION_GRACE`], so a receiver can switch without losing webhooks.

use std::fmt;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::time::Timestamp;

/// The `webhook-signature` header.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// How long a replaced secret keeps signing after a rotation.
pub const ROTATION_GRACE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Random bytes in a generated secret (Standard Webhooks: 24 to 64).
pub const SECRET_BYTES: usize = 32;

const PREFIX: &str = "whsec_";

/// A subscription's signing secret. Its `Debug` shows no byte of it; the only way to read
/// it is [`WebhookSecret::reveal`].
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// A new secret of [`SECRET_BYTES`] bytes from the system's CSPRNG.
    ///
    /// # Panics
    /// When the operating system cannot supply random bytes (as generating an id would).
    pub fn generate() -> Self {
        let mut bytes = vec![0u8; SECRET_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .unwrap_or_else(|_| panic!("the system CSPRNG failed to supply a webhook secret"));
        WebhookSecret(bytes)
    }

    /// Reads `whsec_<base64>` (the prefix is optional, as receivers' libraries allow).
    pub fn parse(s: &str) -> Option<Self> {
        let bytes = STANDARD.decode(s.strip_prefix(PREFIX).unwrap_or(s)).ok()?;
        (!bytes.is_empty()).then_some(WebhookSecret(bytes))
    }

    /// The secret as its owner is shown it: `whsec_<base64>`. Never log this.
    pub fn reveal(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }

    /// `v1,<base64 signature>` of the webhook `id` sent at `timestamp` (Unix seconds).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = hmac::sign(&self.key(), &signed_content(id, timestamp, body));
        format!("v1,{}", STANDARD.encode(tag.as_ref()))
    }

    /// Whether any `v1` signature of a `webhook-signature` header value is this secret's
    /// over (`id`, `timestamp`, `body`). Constant time in the signature compared.
    pub fn verifies(&self, header: &str, id: &str, timestamp: i64, body: &[u8]) -> bool {
        let content = signed_content(id, timestamp, body);
        let key = self.key();
        header
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|b64| STANDARD.decode(b64).ok())
            .any(|tag| hmac::verify(&key, &content, &tag).is_ok())
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl Serialize for WebhookSecret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.reveal())
    }
}

impl<'de> Deserialize<'de> for WebhookSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        WebhookSecret::parse(&s)
            .ok_or_else(|| serde::de::Error::custom("a webhook secret is whsec_<base64>"))
    }
}

/// `{id}.{timestamp}.{body}`: what a `v1` signature covers.
fn signed_content(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let ts = timestamp.to_string();
    let mut out = Vec::with_capacity(id.len() + ts.len() + body.len() + 2);
    out.extend_from_slice(id.as_bytes());
    out.push(b'.');
    out.extend_from_slice(ts.as_bytes());
    out.push(b'.');
    out.extend_from_slice(body);
    out
}

/// A subscription's secrets as stored: the current one and, for a while after a rotation,
/// the one it replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSecrets {
    pub current: WebhookSecret,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<WebhookSecret>,
    /// When `previous` stops signing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_until: Option<Timestamp>,
}

impl SubscriptionSecrets {
    pub fn new(current: WebhookSecret) -> Self {
        SubscriptionSecrets {
            current,
            previous: None,
            previous_until: None,
        }
    }

    /// After a rotation to `new` at `now`: `new` signs, the current secret (if any) signs
    /// beside it until `now` + [`ROTATION_GRACE`], and an older one is dropped.
    pub fn rotated(stored: Option<&Self>, new: WebhookSecret, now: Timestamp) -> Self {
        let grace = i64::try_from(ROTATION_GRACE.as_millis()).unwrap_or(i64::MAX);
        match stored {
            None => SubscriptionSecrets::new(new),
            Some(s) => SubscriptionSecrets {
                current: new,
                previous: Some(s.current.clone()),
                previous_until: Timestamp::from_millis(now.millis().saturating_add(grace)),
            },
        }
    }

    /// The secrets that sign at `now`: the current one first.
    pub fn signing(&self, now: Timestamp) -> impl Iterator<Item = &WebhookSecret> {
        let previous = match (&self.previous, self.previous_until) {
            (Some(p), Some(until)) if now < until => Some(p),
            _ => None,
        };
        std::iter::once(&self.current).chain(previous)
    }

    /// The `webhook-signature` header value at `now`: one `v1` signature per signing
    /// secret, space-separated.
    pub fn header(&self, id: &str, timestamp: i64, body: &[u8], now: Timestamp) -> String {
        self.signing(now)
            .map(|s| s.sign(id, timestamp, body))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Standard Webhooks reference libraries' test vector.
    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TIMESTAMP: i64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let secret = WebhookSecret::parse(VECTOR_SECRET).unwrap();
        assert_eq!(
            secret.sign(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
            VECTOR_SIGNATURE
        );
        assert_eq!(
            secret.reveal(),
            VECTOR_SECRET,
            "the secret reads back as given"
        );
        assert!(secret.verifies(VECTOR_SIGNATURE, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY));
        // The prefix is optional when reading, as in the reference libraries.
        let bare = WebhookSecret::parse(VECTOR_SECRET.trim_start_matches(PREFIX)).unwrap();
        assert_eq!(bare, secret);
    }

    #[test]
    fn verification_fails_on_any_change() {
        let secret = WebhookSecret::parse(VECTOR_SECRET).unwrap();
        let (id, ts, body) = (VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY);
        assert!(!secret.verifies(VECTOR_SIGNATURE, "msg_other", ts, body));
        assert!(!secret.verifies(VECTOR_SIGNATURE, id, ts + 1, body));
        assert!(!secret.verifies(VECTOR_SIGNATURE, id, ts, br#"{"test": 2432232315}"#));
        assert!(!secret.verifies(
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            id,
            ts,
            body
        ));
        assert!(!secret.verifies("", id, ts, body));
        assert!(!secret.verifies("v1,not base64!", id, ts, body));
        let other = WebhookSecret::generate();
        assert!(
            !other.verifies(VECTOR_SIGNATURE, id, ts, body),
            "another subscription's secret does not verify it"
        );
        // One matching signature among several is enough.
        let several = format!("{} {VECTOR_SIGNATURE}", other.sign(id, ts, body));
        assert!(secret.verifies(&several, id, ts, body));
        assert!(other.verifies(&several, id, ts, body));
    }

    #[test]
    fn generated_secrets_are_random_and_never_shown_by_debug() {
        let (a, b) = (WebhookSecret::generate(), WebhookSecret::generate());
        assert_ne!(a, b);
        let shown = a.reveal();
        assert!(shown.starts_with("whsec_"));
        assert_eq!(
            STANDARD.decode(&shown[PREFIX.len()..]).unwrap().len(),
            SECRET_BYTES
        );
        assert_eq!(WebhookSecret::parse(&shown), Some(a.clone()));
        let secrets = SubscriptionSecrets::new(a);
        let debug = format!("{secrets:?}");
        assert!(!debug.contains(&shown[PREFIX.len()..]), "{debug}");
        assert!(WebhookSecret::parse("whsec_").is_none());
        assert!(WebhookSecret::parse("whsec_@@").is_none());
    }

    #[test]
    fn a_replaced_secret_signs_beside_the_new_one_for_the_grace_period() {
        let now = t("2026-05-01T10:00:00Z");
        let (old, new, newer) = (
            WebhookSecret::generate(),
            WebhookSecret::generate(),
            WebhookSecret::generate(),
        );
        let first = SubscriptionSecrets::rotated(None, old.clone(), now);
        assert_eq!(first, SubscriptionSecrets::new(old.clone()));
        assert_eq!(first.signing(now).count(), 1);

        let rotated = SubscriptionSecrets::rotated(Some(&first), new.clone(), now);
        assert_eq!(rotated.current, new);
        assert_eq!(rotated.previous.as_ref(), Some(&old));
        assert_eq!(rotated.previous_until, Some(t("2026-05-02T10:00:00Z")));
        let header = rotated.header("wh_1", 1_777_629_600, b"{}", now);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert_eq!(parts[0], new.sign("wh_1", 1_777_629_600, b"{}"));
        assert!(old.verifies(&header, "wh_1", 1_777_629_600, b"{}"));

        let later = t("2026-05-02T10:00:00Z");
        let header = rotated.header("wh_1", 1, b"{}", later);
        assert_eq!(
            header,
            new.sign("wh_1", 1, b"{}"),
            "the grace period is over"
        );
        assert!(!old.verifies(&header, "wh_1", 1, b"{}"));

        let again = SubscriptionSecrets::rotated(Some(&rotated), newer.clone(), now);
        assert_eq!(
            (again.current, again.previous),
            (newer, Some(new)),
            "a second rotation drops the oldest secret"
        );
    }

    #[test]
    fn secrets_serialize_as_whsec_strings() {
        let secrets = SubscriptionSecrets {
            current: WebhookSecret::parse(VECTOR_SECRET).unwrap(),
            previous: None,
            previous_until: None,
        };
        let json = serde_json::to_value(&secrets).unwrap();
        assert_eq!(json, serde_json::json!({"current": VECTOR_SECRET}));
        assert_eq!(
            serde_json::from_value::<SubscriptionSecrets>(json).unwrap(),
            secrets
        );
    }
}
