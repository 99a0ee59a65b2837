//! The public half of the service keys: what a deployment that never signs holds (on AWS
//! the management API serves the key set from it, without access to any private key) and
//! what the key rotation publishes beside the private keys.

use std::sync::{Arc, RwLock};

use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, ParsedPublicKey, UnparsedPublicKey,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{KeyError, KeyStatus};
use crate::time::Timestamp;

/// One service key without its private part: the JWK coordinates and the key's life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicKey {
    pub kid: String,
    pub status: KeyStatus,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<Timestamp>,
    /// The P-256 point's coordinates (32 bytes each), base64url as in a JWK.
    pub x: String,
    pub y: String,
}

impl PublicKey {
    /// From an uncompressed point (0x04 || x || y).
    pub(super) fn from_point(
        kid: &str,
        status: KeyStatus,
        created_at: Timestamp,
        retired_at: Option<Timestamp>,
        point: &[u8],
    ) -> Self {
        let coordinate = |r: std::ops::Range<usize>| B64.encode(point.get(r).unwrap_or_default());
        PublicKey {
            kid: kid.to_owned(),
            status,
            created_at,
            retired_at,
            x: coordinate(1..33),
            y: coordinate(33..65),
        }
    }

    /// The uncompressed point (0x04 || x || y).
    fn point(&self) -> Result<Vec<u8>, KeyError> {
        let coordinate = |c: &str| {
            B64.decode(c)
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or_else(|| KeyError(format!("{}: not a P-256 public key", self.kid)))
        };
        let mut point = Vec::with_capacity(65);
        point.push(4);
        point.extend(coordinate(&self.x)?);
        point.extend(coordinate(&self.y)?);
        Ok(point)
    }

    /// The key as a JWK of the published set; a retired key with `retiredAt` (a webhook
    /// it signed dated more than `KEY_PROPAGATION` after that is forged).
    pub fn jwk(&self) -> Value {
        let mut jwk = json!({
            "kid": self.kid,
            "kty": "EC",
            "crv": "P-256",
            "x": self.x,
            "y": self.y,
            "alg": "ES256",
            "use": "sig",
            "algorithm": "secp256r1-sha256",
            "status": self.status,
        });
        if let (KeyStatus::Retired, Some(at)) = (self.status, self.retired_at) {
            jwk["retiredAt"] = json!(at);
        }
        jwk
    }
}

/// The published key set as JWKs: every key, retired ones too (what they signed stays in
/// the log; see `RETIRED_PRIVATE_KEY_LIFETIME`).
pub(super) fn jwks<'a>(keys: impl Iterator<Item = &'a PublicKey>) -> Value {
    let keys: Vec<Value> = keys.map(PublicKey::jwk).collect();
    json!({ "keys": keys })
}

/// The `kid` of a compact JWS's protected header.
pub(super) fn jws_kid(signing_input: &str) -> Option<String> {
    signing_input
        .split('.')
        .next()
        .and_then(|h| B64.decode(h).ok())
        .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
        .and_then(|h| h.get("kid").and_then(Value::as_str).map(str::to_owned))
}

struct Entry {
    key: PublicKey,
    point: Vec<u8>,
}

/// The service's public keys, replaceable while in use (a warm function reloads them after
/// a rotation). Publishes and verifies; cannot sign.
pub struct PublishedKeys {
    set: RwLock<Arc<Vec<Entry>>>,
}

impl std::fmt::Debug for PublishedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<String> = self.current().iter().map(|e| e.key.kid.clone()).collect();
        f.debug_struct("PublishedKeys")
            .field("kids", &kids)
            .finish()
    }
}

fn entries(keys: &[PublicKey]) -> Result<Vec<Entry>, KeyError> {
    let entries = keys
        .iter()
        .map(|k| {
            let point = k.point()?;
            // On the curve, not merely 65 bytes.
            ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
                .map_err(|_| KeyError(format!("{}: not a P-256 public key", k.kid)))?;
            Ok(Entry {
                point,
                key: k.clone(),
            })
        })
        .collect::<Result<Vec<_>, KeyError>>()?;
    if !entries.iter().any(|e| e.key.status == KeyStatus::Active) {
        return Err(KeyError("no active key".into()));
    }
    Ok(entries)
}

impl PublishedKeys {
    /// A set with an active key among well-formed keys.
    pub fn from_keys(keys: &[PublicKey]) -> Result<Self, KeyError> {
        Ok(PublishedKeys {
            set: RwLock::new(Arc::new(entries(keys)?)),
        })
    }

    /// Replaces the set; an unusable set is refused and the current one kept.
    pub fn replace_keys(&self, keys: &[PublicKey]) -> Result<(), KeyError> {
        let set = Arc::new(entries(keys)?);
        *self
            .set
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = set;
        Ok(())
    }

    fn current(&self) -> Arc<Vec<Entry>> {
        self.set
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The keys of the set (every one is published).
    pub fn keys(&self) -> Vec<PublicKey> {
        self.current().iter().map(|e| e.key.clone()).collect()
    }

    /// The published key set as JWKs (as `Signer::jwks` publishes it).
    pub fn jwks(&self) -> Value {
        jwks(self.current().iter().map(|e| &e.key))
    }

    /// Verifies a DER signature (a webhook's) made by the published key `kid`.
    pub fn verify_der(&self, kid: &str, message: &[u8], signature: &[u8]) -> bool {
        self.current().iter().filter(|e| e.key.kid == kid).any(|e| {
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &e.point)
                .verify(message, signature)
                .is_ok()
        })
    }

    /// Verifies a compact JWS made by one of the keys.
    pub fn verify_jws(&self, jws: &str) -> bool {
        let Some((signing_input, sig_b64)) = jws.rsplit_once('.') else {
            return false;
        };
        let (Ok(sig), Some(kid)) = (B64.decode(sig_b64), jws_kid(signing_input)) else {
            return false;
        };
        self.current().iter().filter(|e| e.key.kid == kid).any(|e| {
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &e.point)
                .verify(signing_input.as_bytes(), &sig)
                .is_ok()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{Signer, StoredKey, rotate};
    use super::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    #[test]
    fn the_public_keys_publish_and_verify_like_the_signer() {
        let t = at("2026-01-01T00:00:00Z");
        let old = StoredKey::generate("old".into(), t).unwrap();
        let keys = rotate(
            &[old],
            StoredKey::generate("new".into(), t).unwrap(),
            Timestamp::now(),
        );
        let signer = Signer::from_keys(&keys).unwrap();
        let public = signer.public_keys();
        assert_eq!(public.len(), 2);
        let text = serde_json::to_string(&public).unwrap();
        assert!(!text.contains("pkcs8"), "no private part: {text}");
        for k in &keys {
            assert!(!text.contains(k.pkcs8.as_deref().unwrap()));
        }
        let published = PublishedKeys::from_keys(&public).unwrap();
        assert_eq!(published.jwks(), signer.jwks());
        assert_eq!(published.keys(), public);

        let jws = signer.sign_jws(br#"{"a":1}"#);
        assert!(published.verify_jws(&jws));
        assert!(!published.verify_jws(&jws.replace(".eyJ", ".eyK")));
        let (der, kid) = signer.sign_der(b"message", Timestamp::now());
        assert!(published.verify_der(&kid, b"message", &der));
        assert!(!published.verify_der(&kid, b"other", &der));
    }

    #[test]
    fn malformed_or_inactive_sets_are_refused() {
        let key = StoredKey::generate("k".into(), at("2026-01-01T00:00:00Z")).unwrap();
        let good = Signer::from_keys(&[key]).unwrap().public_keys();
        let published = PublishedKeys::from_keys(&good).unwrap();
        assert!(PublishedKeys::from_keys(&[]).is_err());
        let mut short = good.clone();
        short[0].x = "AAAA".into();
        assert!(PublishedKeys::from_keys(&short).is_err());
        // 32 bytes a coordinate, but not a point of the curve.
        let mut off_curve = good.clone();
        off_curve[0].y = off_curve[0].x.clone();
        assert!(PublishedKeys::from_keys(&off_curve).is_err());
        let mut retired = good.clone();
        retired[0].status = KeyStatus::Retired;
        assert!(published.replace_keys(&retired).is_err());
        assert_eq!(
            published.keys(),
            good,
            "a refused set keeps the current one"
        );
    }
}
