//! Compact JWS (ES256) for stored entries and ECDSA P-256 signatures for webhooks.
//! The key material is handed in by an adapter (data dir or secret); nothing here reads it.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, UnparsedPublicKey,
};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::time::Timestamp;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwsError {
    #[error("is not a compact JWS (three base64url parts separated by dots)")]
    Shape,
    #[error("has a payload that is not base64url")]
    Base64,
    #[error("has a payload that is not JSON")]
    Json,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid signing key: {0}")]
pub struct KeyError(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    Active,
    Retired,
}

/// One key of the service as stored by adapters: PKCS#8 (DER, base64).
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredKey {
    pub kid: String,
    pub status: KeyStatus,
    pub pkcs8: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<Timestamp>,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("kid", &self.kid)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl StoredKey {
    /// Generates a new active P-256 key.
    pub fn generate(kid: String, created_at: Timestamp) -> Result<Self, KeyError> {
        let doc =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|e| KeyError(e.to_string()))?;
        Ok(StoredKey {
            kid,
            status: KeyStatus::Active,
            pkcs8: STANDARD.encode(doc.as_ref()),
            created_at,
            retired_at: None,
        })
    }

    fn der(&self) -> Result<Vec<u8>, KeyError> {
        STANDARD
            .decode(&self.pkcs8)
            .map_err(|e| KeyError(format!("{}: {e}", self.kid)))
    }
}

struct PublishedKey {
    kid: String,
    status: KeyStatus,
    /// Uncompressed point: 0x04 || x || y.
    public: Vec<u8>,
}

/// The service's key set: the newest active key signs; retired keys stay published.
pub struct Signer {
    kid: String,
    /// Signs JWS (fixed r||s signatures).
    jws_key: EcdsaKeyPair,
    /// Signs webhooks (DER signatures); same key.
    der_key: EcdsaKeyPair,
    rng: SystemRandom,
    /// base64url of the protected header `{"alg":"ES256","kid":...,"typ":"JWT"}`.
    header_b64: String,
    published: Vec<PublishedKey>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl Signer {
    pub fn from_keys(keys: &[StoredKey]) -> Result<Self, KeyError> {
        let mut published = Vec::with_capacity(keys.len());
        let mut active: Option<&StoredKey> = None;
        for k in keys {
            let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &k.der()?)
                .map_err(|e| KeyError(format!("{}: {e}", k.kid)))?;
            published.push(PublishedKey {
                kid: k.kid.clone(),
                status: k.status,
                public: pair.public_key().as_ref().to_vec(),
            });
            if k.status == KeyStatus::Active && active.is_none_or(|a| a.created_at < k.created_at) {
                active = Some(k);
            }
        }
        let k = active.ok_or_else(|| KeyError("no active key".into()))?;
        let der = k.der()?;
        let jws_key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
            .map_err(|e| KeyError(e.to_string()))?;
        let der_key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der)
            .map_err(|e| KeyError(e.to_string()))?;
        let header = json!({"alg": "ES256", "kid": k.kid, "typ": "JWT"});
        Ok(Signer {
            kid: k.kid.clone(),
            jws_key,
            der_key,
            rng: SystemRandom::new(),
            header_b64: B64.encode(header.to_string()),
            published,
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Signs `payload` as a compact JWS with the active key.
    pub fn sign_jws(&self, payload: &[u8]) -> String {
        let mut out = String::with_capacity(self.header_b64.len() + payload.len() * 4 / 3 + 92);
        out.push_str(&self.header_b64);
        out.push('.');
        B64.encode_string(payload, &mut out);
        let sig = self
            .jws_key
            .sign(&self.rng, out.as_bytes())
            .unwrap_or_else(|e| panic!("ECDSA signing failed: {e}"));
        out.push('.');
        B64.encode_string(sig.as_ref(), &mut out);
        out
    }

    /// DER signature over `message` (webhook signatures), with the kid that made it.
    pub fn sign_der(&self, message: &[u8]) -> (Vec<u8>, &str) {
        let sig = self
            .der_key
            .sign(&self.rng, message)
            .unwrap_or_else(|e| panic!("ECDSA signing failed: {e}"));
        (sig.as_ref().to_vec(), &self.kid)
    }

    /// The published key set as JWKs.
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self
            .published
            .iter()
            .map(|k| {
                let (x, y) = k.public[1..].split_at(32);
                json!({
                    "kid": k.kid,
                    "kty": "EC",
                    "crv": "P-256",
                    "x": B64.encode(x),
                    "y": B64.encode(y),
                    "alg": "ES256",
                    "use": "sig",
                    "algorithm": "secp256r1-sha256",
                    "status": k.status,
                })
            })
            .collect();
        json!({ "keys": keys })
    }

    /// Verifies a DER signature (a webhook's) made by the published key `kid`.
    pub fn verify_der(&self, kid: &str, message: &[u8], signature: &[u8]) -> bool {
        self.published.iter().filter(|k| k.kid == kid).any(|k| {
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &k.public)
                .verify(message, signature)
                .is_ok()
        })
    }

    /// Verifies a compact JWS made by one of the published keys (tests and tools).
    pub fn verify_jws(&self, jws: &str) -> bool {
        let Some((signing_input, sig_b64)) = jws.rsplit_once('.') else {
            return false;
        };
        let Ok(sig) = B64.decode(sig_b64) else {
            return false;
        };
        let kid = signing_input
            .split('.')
            .next()
            .and_then(|h| B64.decode(h).ok())
            .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
            .and_then(|h| h.get("kid").and_then(Value::as_str).map(str::to_owned));
        self.published
            .iter()
            .filter(|k| Some(k.kid.as_str()) == kid.as_deref())
            .any(|k| {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &k.public)
                    .verify(signing_input.as_bytes(), &sig)
                    .is_ok()
            })
    }
}

/// Decodes the payload of a compact JWS without verifying it (entries are stored verbatim;
/// the service does not verify client signatures, INTERFACE.md).
pub fn decode_jws_payload(jws: &str) -> Result<Value, JwsError> {
    let mut parts = jws.split('.');
    let (Some(h), Some(p), Some(_s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwsError::Shape);
    };
    if h.is_empty() || p.is_empty() {
        return Err(JwsError::Shape);
    }
    let bytes = B64.decode(p).map_err(|_| JwsError::Base64)?;
    serde_json::from_slice(&bytes).map_err(|_| JwsError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn test_signer() -> Signer {
        let key = StoredKey::generate(
            "k1".into(),
            Timestamp::parse("2026-01-01T00:00:00Z").unwrap(),
        )
        .unwrap();
        Signer::from_keys(&[key]).unwrap()
    }

    #[test]
    fn signs_and_decodes_entries() {
        let s = test_signer();
        let jws = s.sign_jws(br#"{"type":"itemRemoval","data":{"itemId":"a"}}"#);
        assert!(s.verify_jws(&jws));
        let payload = decode_jws_payload(&jws).unwrap();
        assert_eq!(payload["data"]["itemId"], "a");
        let mut tampered = jws.clone();
        tampered.insert(jws.find('.').unwrap() + 2, 'A');
        assert!(!s.verify_jws(&tampered));
    }

    #[test]
    fn jwks_publish_the_key() {
        let jwks = test_signer().jwks();
        assert_eq!(jwks["keys"][0]["kid"], "k1");
        assert_eq!(jwks["keys"][0]["crv"], "P-256");
        assert_eq!(jwks["keys"][0]["status"], "active");
        assert_eq!(jwks["keys"][0]["x"].as_str().unwrap().len(), 43);
    }

    #[test]
    fn rejects_malformed_jws() {
        assert_eq!(decode_jws_payload("a.b"), Err(JwsError::Shape));
        assert_eq!(decode_jws_payload("a.!!.c"), Err(JwsError::Base64));
        assert_eq!(decode_jws_payload("a.bm90IGpzb24.c"), Err(JwsError::Json));
    }
}
