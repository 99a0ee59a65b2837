//! Compact JWS (ES256) for stored entries and ECDSA P-256 signatures for webhooks.
//! The key material is handed in by an adapter (data dir or secret); nothing here reads it.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, ParsedPublicKey, UnparsedPublicKey,
};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD as B64};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::time::Timestamp;

mod published;

pub use published::{PublicKey, PublishedKeys};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JwsError {
    #[error("is not a compact JWS (three base64url parts separated by dots)")]
    Shape,
    #[error("has a payload that is not base64url")]
    Base64,
    #[error("has a payload that is not JSON")]
    Json,
    #[error("has a header that is not a base64url JSON object naming its \"alg\"")]
    Header,
    #[error(
        "is unsecured (\"alg\": \"none\"): send the entry as plain JSON, or signed (an \
         unsecured JWS proves nothing a plain entry does not)"
    )]
    Unsecured,
    #[error(
        "has a header naming an extension (\"crit\", or \"b64\" other than true) the \
         service does not implement: send it without, or as plain JSON"
    )]
    Extension,
    #[error("has a signature that is not base64url")]
    Signature,
    #[error("has a payload that names a member twice in one object")]
    DuplicateMember,
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

/// One key of the service as stored by adapters: PKCS#8 (DER, base64), or, for a key
/// retired long ago, only its public point (see [`rotate`]).
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredKey {
    pub kid: String,
    pub status: KeyStatus,
    /// The private key; absent from the first rotation at least
    /// [`RETIRED_PRIVATE_KEY_LIFETIME`] after the key retired (it signs nothing then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pkcs8: Option<String>,
    /// The public point (uncompressed, base64url) of a key whose private half is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<String>,
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
            pkcs8: Some(STANDARD.encode(doc.as_ref())),
            public: None,
            created_at,
            retired_at: None,
        })
    }

    /// The key's two signing forms, when its private half is kept.
    fn pair(&self) -> Result<Option<SigningPair>, KeyError> {
        let Some(pkcs8) = &self.pkcs8 else {
            return Ok(None);
        };
        let bad = |e: &dyn std::fmt::Display| KeyError(format!("{}: {e}", self.kid));
        let der = STANDARD.decode(pkcs8).map_err(|e| bad(&e))?;
        Ok(Some(SigningPair {
            jws: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
                .map_err(|e| bad(&e))?,
            der: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der)
                .map_err(|e| bad(&e))?,
        }))
    }

    /// The key without its private half: the public point kept, so that what it signed
    /// still verifies. `None` when the private half does not decode (the key is kept whole).
    fn public_only(&self) -> Option<StoredKey> {
        let pair = self.pair().ok()??;
        Some(StoredKey {
            pkcs8: None,
            public: Some(B64.encode(pair.jws.public_key().as_ref())),
            ..self.clone()
        })
    }
}

/// A private key in the two forms the service signs with.
struct SigningPair {
    /// Signs JWS (fixed r||s signatures).
    jws: EcdsaKeyPair,
    /// Signs webhooks (DER signatures); the same key.
    der: EcdsaKeyPair,
}

/// How long a retired key keeps its private half: the next rotation after that keeps only
/// its public point. The key stays published (DESIGN.md section 7 asks for 7 days; the
/// log's entries are stored signed "so clients can verify" them, INTERFACE.md, for as long
/// as the log is kept, docs/webhooks.md; up to [`MAX_RETIRED_KEYS`]), and never signs
/// again [`KEY_PROPAGATION`] after it retired.
pub const RETIRED_PRIVATE_KEY_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most retired keys a set keeps (the newest): 25 years of the AWS stack's default
/// 90-day rotation. It bounds the key secret (about 200 bytes a key; Secrets Manager takes
/// 64 KB) and the published set; the oldest key beyond it is dropped, and what it signed
/// can no longer be verified.
pub const MAX_RETIRED_KEYS: usize = 100;
/// A new key signs only once it has been published this long, so every process that
/// reloads its keys at least this often publishes it before anyone receives a signature
/// made with it; until then the key it replaced keeps signing.
pub const KEY_PROPAGATION: Duration = Duration::from_secs(10 * 60);

/// Rotates a key set: `new` becomes the active key and every active key is retired at
/// `now` (it keeps signing for [`KEY_PROPAGATION`]). Every key stays published (the newest
/// [`MAX_RETIRED_KEYS`] retired ones); a key retired more than
/// [`RETIRED_PRIVATE_KEY_LIFETIME`] ago keeps only its public point.
pub fn rotate(keys: &[StoredKey], new: StoredKey, now: Timestamp) -> Vec<StoredKey> {
    let long_ago = now
        .millis()
        .saturating_sub(ms(RETIRED_PRIVATE_KEY_LIFETIME));
    let mut out: Vec<StoredKey> = keys
        .iter()
        .map(|k| match (k.status, k.retired_at) {
            (KeyStatus::Active, _) => StoredKey {
                status: KeyStatus::Retired,
                retired_at: Some(now),
                ..k.clone()
            },
            (KeyStatus::Retired, Some(at)) if k.pkcs8.is_some() && at.millis() < long_ago => {
                k.public_only().unwrap_or_else(|| k.clone())
            }
            (KeyStatus::Retired, _) => k.clone(),
        })
        .collect();
    // Beyond the cap the oldest to retire goes first (a key without a date counts as the
    // oldest); a rotation retires one key, so this usually drops one.
    let retired = |k: &StoredKey| k.status == KeyStatus::Retired;
    while out.iter().filter(|k| retired(k)).count() > MAX_RETIRED_KEYS {
        let oldest = out
            .iter()
            .enumerate()
            .filter(|(_, k)| retired(k))
            .min_by_key(|(_, k)| k.retired_at.map_or(i64::MIN, |at| at.millis()))
            .map(|(i, _)| i);
        if let Some(i) = oldest {
            out.remove(i);
        }
    }
    out.push(new);
    out
}

/// The kids of `before` that `after` no longer holds: the retired keys a [`rotate`] dropped
/// beyond [`MAX_RETIRED_KEYS`], whose signatures can no longer be verified (the rotation
/// says so).
pub fn dropped_kids(before: &[StoredKey], after: &[StoredKey]) -> Vec<String> {
    before
        .iter()
        .filter(|k| !after.iter().any(|a| a.kid == k.kid))
        .map(|k| k.kid.clone())
        .collect()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

struct KeyEntry {
    kid: String,
    status: KeyStatus,
    created_at: Timestamp,
    retired_at: Option<Timestamp>,
    /// Uncompressed point: 0x04 || x || y.
    public: Vec<u8>,
    /// The private key; `None` for a key retired long ago (it only verifies).
    pair: Option<SigningPair>,
    /// base64url of the protected header `{"alg":"ES256","kid":...,"typ":"JWT"}`.
    header_b64: String,
    stored: StoredKey,
    published: PublicKey,
}

impl KeyEntry {
    /// Whether this key may still sign at `now`: it has its private half and is active or
    /// retired less than [`KEY_PROPAGATION`] ago.
    fn in_service(&self, now: Timestamp) -> bool {
        self.pair.is_some()
            && match self.status {
                KeyStatus::Active => true,
                KeyStatus::Retired => self.retired_at.is_some_and(|at| {
                    at.millis().saturating_add(ms(KEY_PROPAGATION)) > now.millis()
                }),
            }
    }

    /// Whether this key has been published for [`KEY_PROPAGATION`] at `now`.
    fn propagated(&self, now: Timestamp) -> bool {
        self.created_at.millis().saturating_add(ms(KEY_PROPAGATION)) <= now.millis()
    }
}

struct KeySet {
    entries: Vec<KeyEntry>,
}

impl KeySet {
    fn new(keys: &[StoredKey]) -> Result<Self, KeyError> {
        let mut entries = Vec::with_capacity(keys.len());
        for k in keys {
            let pair = k.pair()?;
            let public = match (&pair, &k.public) {
                (Some(pair), _) => pair.jws.public_key().as_ref().to_vec(),
                // A key retired long ago: only its public point, and it never signs.
                (None, Some(point)) if k.status == KeyStatus::Retired => B64
                    .decode(point)
                    .ok()
                    .filter(|p| ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, p).is_ok())
                    .ok_or_else(|| KeyError(format!("{}: not a P-256 public point", k.kid)))?,
                (None, Some(_)) => {
                    return Err(KeyError(format!(
                        "{}: no private key (only a retired key may lack one)",
                        k.kid
                    )));
                }
                (None, None) => {
                    return Err(KeyError(format!(
                        "{}: neither a private key nor a public point",
                        k.kid
                    )));
                }
            };
            let header = json!({"alg": "ES256", "kid": k.kid, "typ": "JWT"});
            entries.push(KeyEntry {
                kid: k.kid.clone(),
                status: k.status,
                created_at: k.created_at,
                retired_at: k.retired_at,
                published: PublicKey::from_point(
                    &k.kid,
                    k.status,
                    k.created_at,
                    k.retired_at,
                    &public,
                ),
                public,
                pair,
                header_b64: B64.encode(header.to_string()),
                stored: k.clone(),
            });
        }
        if !entries.iter().any(|e| e.status == KeyStatus::Active) {
            return Err(KeyError("no active key".into()));
        }
        Ok(KeySet { entries })
    }

    /// The key that signs at `now` and its private key. No key signs before it has been
    /// published for [`KEY_PROPAGATION`], except a fresh set's first key, which signs at
    /// once; each key signs from then until the next key has propagated. So: the newest
    /// key still in service (active, or retired less than [`KEY_PROPAGATION`] ago) that
    /// has propagated, else the oldest in service, else the newest active one (an active
    /// key always has its private half: [`KeySet::new`]). A key retired before it
    /// propagated (two rotations within [`KEY_PROPAGATION`]) signs only once it has, until
    /// the key after it has.
    fn signing_pair(&self, now: Timestamp) -> (&KeyEntry, &SigningPair) {
        let key = self.signing(now);
        let pair = key
            .pair
            .as_ref()
            .unwrap_or_else(|| unreachable!("the signing key has its private half"));
        (key, pair)
    }

    /// See [`KeySet::signing_pair`].
    fn signing(&self, now: Timestamp) -> &KeyEntry {
        let in_service = || self.entries.iter().filter(|e| e.in_service(now));
        in_service()
            .filter(|e| e.propagated(now))
            .max_by_key(|e| e.created_at.0)
            .or_else(|| in_service().min_by_key(|e| e.created_at.0))
            .or_else(|| {
                self.entries
                    .iter()
                    .filter(|e| e.status == KeyStatus::Active)
                    .max_by_key(|e| e.created_at.0)
            })
            .unwrap_or_else(|| unreachable!("a key set holds an active key"))
    }
}

/// The service's key set: one key signs (the newest that has propagated); every key is
/// published, retired ones too (see [`rotate`]). The set can be replaced while in use
/// (rotation), so a long-running process picks up keys rotated elsewhere.
pub struct Signer {
    set: RwLock<Arc<KeySet>>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.kid())
            .finish_non_exhaustive()
    }
}

impl Signer {
    pub fn from_keys(keys: &[StoredKey]) -> Result<Self, KeyError> {
        Ok(Signer {
            set: RwLock::new(Arc::new(KeySet::new(keys)?)),
            rng: SystemRandom::new(),
        })
    }

    /// Replaces the key set (after a rotation); an unusable set is refused and the current
    /// one kept.
    pub fn replace_keys(&self, keys: &[StoredKey]) -> Result<(), KeyError> {
        let set = Arc::new(KeySet::new(keys)?);
        *self
            .set
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = set;
        Ok(())
    }

    /// The stored form of the current set (to compare with what storage holds).
    pub fn stored_keys(&self) -> Vec<StoredKey> {
        self.current()
            .entries
            .iter()
            .map(|e| e.stored.clone())
            .collect()
    }

    fn current(&self) -> Arc<KeySet> {
        self.set
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// When the key that signs at `now` was created (its age is a metric: rotation works).
    pub fn signing_key_created_at(&self, now: Timestamp) -> Timestamp {
        self.current().signing(now).created_at
    }

    /// The kid of the key that signs now.
    pub fn kid(&self) -> String {
        self.current().signing(Timestamp::now()).kid.clone()
    }

    /// Signs `payload` as a compact JWS with the signing key.
    pub fn sign_jws(&self, payload: &[u8]) -> String {
        let set = self.current();
        let (key, pair) = set.signing_pair(Timestamp::now());
        let mut out = String::with_capacity(key.header_b64.len() + payload.len() * 4 / 3 + 92);
        out.push_str(&key.header_b64);
        out.push('.');
        B64.encode_string(payload, &mut out);
        let sig = pair
            .jws
            .sign(&self.rng, out.as_bytes())
            .unwrap_or_else(|e| panic!("ECDSA signing failed: {e}"));
        out.push('.');
        B64.encode_string(sig.as_ref(), &mut out);
        out
    }

    /// DER signature over `message` (webhook signatures) with the key that signs at `now`,
    /// and that key's kid.
    pub fn sign_der(&self, message: &[u8], now: Timestamp) -> (Vec<u8>, String) {
        let set = self.current();
        let (key, pair) = set.signing_pair(now);
        let sig = pair
            .der
            .sign(&self.rng, message)
            .unwrap_or_else(|e| panic!("ECDSA signing failed: {e}"));
        (sig.as_ref().to_vec(), key.kid.clone())
    }

    /// The published key set as JWKs: every key, active or retired.
    pub fn jwks(&self) -> Value {
        let set = self.current();
        published::jwks(set.entries.iter().map(|e| &e.published))
    }

    /// The public halves of the set (what a deployment that never signs publishes).
    pub fn public_keys(&self) -> Vec<PublicKey> {
        self.current()
            .entries
            .iter()
            .map(|e| e.published.clone())
            .collect()
    }

    /// Verifies a DER signature (a webhook's) made by the published key `kid`.
    pub fn verify_der(&self, kid: &str, message: &[u8], signature: &[u8]) -> bool {
        self.current()
            .entries
            .iter()
            .filter(|k| k.kid == kid)
            .any(|k| {
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
        let kid = published::jws_kid(signing_input);
        self.current()
            .entries
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
    let (_, payload, _) = jws_parts(jws)?;
    serde_json::from_slice(&payload).map_err(|_| JwsError::Json)
}

/// The header, the decoded payload and the signature of a compact JWS: three parts, the
/// first two not empty, the payload base64url.
fn jws_parts(jws: &str) -> Result<(&str, Vec<u8>, &str), JwsError> {
    let mut parts = jws.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwsError::Shape);
    };
    if h.is_empty() || p.is_empty() {
        return Err(JwsError::Shape);
    }
    let payload = B64.decode(p).map_err(|_| JwsError::Base64)?;
    Ok((h, payload, s))
}

/// Checks a client's compact JWS before it is stored verbatim and returns its payload: three
/// base64url parts, a header that is a JSON object naming its `alg`, a payload that is
/// JSON. The signature is not verified (the service does not know client keys,
/// INTERFACE.md), only its form, so that every stored entry parses with a JWS library.
pub fn decode_client_jws(jws: &str) -> Result<Value, JwsError> {
    let (header, payload, signature) = jws_parts(jws)?;
    // Parsed once; a payload that is not JSON is named before the header and signature,
    // a member named twice after them.
    let parsed = unique_members(&payload);
    if let Err(JwsError::Json) = parsed {
        return Err(JwsError::Json);
    }
    let base64url = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    // The header too names each member once (`{"alg":"none","alg":"ES256"}` says two
    // things), and not `alg: none`: an unsecured JWS has an empty signature (RFC 7518
    // section 3.6), which is refused below, so with one it is malformed either way.
    let decoded = base64url(header)
        .then(|| B64.decode(header).ok())
        .flatten()
        .and_then(|b| unique_members(&b).ok());
    let alg = decoded
        .as_ref()
        .and_then(|h| h.get("alg").and_then(Value::as_str));
    match alg {
        None => return Err(JwsError::Header),
        Some("none") => return Err(JwsError::Unsecured),
        Some(_) => {}
    }
    // No extension is implemented: a `crit` one must be refused (RFC 7515 section
    // 4.1.11), and `b64: false` (RFC 7797) says the payload is not the base64url the
    // service read, so a library honouring it would read another entry.
    let extended = decoded.is_some_and(|h| {
        h.get("crit").is_some() || h.get("b64").is_some_and(|b| b != &Value::Bool(true))
    });
    if extended {
        return Err(JwsError::Extension);
    }
    if !base64url(signature) || B64.decode(signature).is_err() {
        return Err(JwsError::Signature);
    }
    parsed
}

/// Parses JSON that names no member twice in one object. The payload of a client's JWS is
/// stored as it came: where a member repeats, the service would apply the last value and a
/// client's parser might take the first, so the record would say two things.
fn unique_members(bytes: &[u8]) -> Result<Value, JwsError> {
    crate::document::parse_unique(bytes).map_err(|e| match e {
        crate::document::ParseError::Duplicate(_) => JwsError::DuplicateMember,
        crate::document::ParseError::Json(_) => JwsError::Json,
    })
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
    fn a_client_jws_is_refused_for_what_is_wrong_with_its_header() {
        let part = |v: &str| B64.encode(v);
        let payload = part(r#"{"type":"itemSale"}"#);
        let jws = |header: &str, signature: &str| format!("{}.{payload}.{signature}", part(header));
        // An unsecured JWS says so (it was "a header ... not naming its alg").
        for signature in ["", "c2ln"] {
            assert_eq!(
                decode_client_jws(&jws(r#"{"alg":"none"}"#, signature)),
                Err(JwsError::Unsecured)
            );
        }
        assert_eq!(
            decode_client_jws(&jws(r#"{"typ":"JWT"}"#, "c2ln")),
            Err(JwsError::Header)
        );
        assert!(decode_client_jws(&jws(r#"{"alg":"ES256"}"#, "c2ln")).is_ok());
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
    fn rotation_publishes_first_and_signs_after_propagation() {
        let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let at = |mins: i64| Timestamp::from_millis(t0.millis() + mins * 60_000).unwrap();
        let old = StoredKey::generate("old".into(), at(-1000)).unwrap();
        let keys = rotate(
            &[old],
            StoredKey::generate("new".into(), at(0)).unwrap(),
            at(0),
        );
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].status, KeyStatus::Retired);
        assert_eq!(keys[0].retired_at, Some(at(0)));
        let set = KeySet::new(&keys).unwrap();
        // The old key signs until the new one has propagated.
        assert_eq!(set.signing(at(5)).kid, "old");
        assert_eq!(set.signing(at(11)).kid, "new");
        // A week after it retired, the next rotation keeps only the old key's public
        // point: it stays published and verifies what it signed, and never signs again.
        let signed_by_old = Signer::from_keys(&keys).unwrap().sign_jws(b"{}");
        let week = 7 * 24 * 60;
        let early = rotate(
            &keys,
            StoredKey::generate("newer".into(), at(week - 1)).unwrap(),
            at(week - 1),
        );
        assert!(early[0].pkcs8.is_some(), "kept whole within the week");
        let again = rotate(
            &keys,
            StoredKey::generate("newer".into(), at(week + 1)).unwrap(),
            at(week + 1),
        );
        let kids: Vec<&str> = again.iter().map(|k| k.kid.as_str()).collect();
        assert_eq!(kids, ["old", "new", "newer"]);
        assert_eq!(again[0].pkcs8, None);
        assert!(again[1].pkcs8.is_some(), "retired now: kept whole");
        // Stored and read back, as adapters do.
        let again: Vec<StoredKey> =
            serde_json::from_str(&serde_json::to_string(&again).unwrap()).unwrap();
        let signer = Signer::from_keys(&again).unwrap();
        assert!(signer.verify_jws(&signed_by_old));
        let jwks = signer.jwks();
        let published: Vec<&str> = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap())
            .collect();
        assert_eq!(published, ["old", "new", "newer"]);
        let set = KeySet::new(&again).unwrap();
        for mins in [week + 1, week + 5, week + 11, 10 * week] {
            assert_ne!(set.signing(at(mins)).kid, "old");
        }
        // Years of rotations later, the oldest key is still there.
        let mut keys = again;
        for year in 1..=3 {
            let t = at(year * 52 * week);
            keys = rotate(
                &keys,
                StoredKey::generate(format!("y{year}"), t).unwrap(),
                t,
            );
        }
        assert!(Signer::from_keys(&keys).unwrap().verify_jws(&signed_by_old));
        assert_eq!(keys.iter().filter(|k| k.pkcs8.is_some()).count(), 2);
        // A public point must be on the curve.
        let mut bent = keys[0].clone();
        let mut point = B64.decode(bent.public.as_deref().unwrap()).unwrap();
        point[64] ^= 1;
        bent.public = Some(B64.encode(&point));
        assert!(KeySet::new(&[bent, keys.last().unwrap().clone()]).is_err());
        // Only a retired key may lack its private half.
        let mut headless = keys.last().unwrap().public_only().unwrap();
        headless.status = KeyStatus::Active;
        assert!(KeySet::new(&[headless]).is_err());
        // A set whose only active key is fresh signs with it at once.
        let fresh = KeySet::new(&[StoredKey::generate("f".into(), at(0)).unwrap()]).unwrap();
        assert_eq!(fresh.signing(at(0)).kid, "f");
    }

    #[test]
    fn no_key_signs_before_it_has_propagated() {
        let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let at = |secs: i64| Timestamp::from_millis(t0.millis() + secs * 1000).unwrap();
        let key = |kid: &str, secs: i64| StoredKey::generate(kid.into(), at(secs)).unwrap();
        // Which key signs at each (seconds, kid) of `expected`.
        let signs = |keys: &[StoredKey], expected: &[(i64, &str)]| {
            let set = KeySet::new(keys).unwrap();
            for &(secs, kid) in expected {
                assert_eq!(set.signing(at(secs)).kid, kid, "at {secs} s");
            }
        };
        // Two rotations a minute apart: each key signs from its propagation until the
        // next key's, the second for a minute only, and none before it propagated.
        let once = rotate(&[key("k0", -100_000)], key("k1", 0), at(0));
        let twice = rotate(&once, key("k2", 60), at(60));
        signs(
            &twice,
            &[
                (100, "k0"),
                (599, "k0"),
                (600, "k1"),
                (659, "k1"),
                (660, "k2"),
            ],
        );
        // A fresh set's first key, rotated within its first minutes, keeps signing until
        // the next key has propagated: the next key never signs early.
        let fresh = rotate(&[key("f0", 0)], key("f1", 120), at(120));
        signs(&fresh, &[(0, "f0"), (130, "f0"), (719, "f0"), (720, "f1")]);
        // Rotated twice within its first minutes: still the first key, then each in turn.
        let again = rotate(&fresh, key("f2", 180), at(180));
        signs(
            &again,
            &[
                (181, "f0"),
                (719, "f0"),
                (720, "f1"),
                (779, "f1"),
                (780, "f2"),
            ],
        );
    }

    #[test]
    fn a_key_without_its_private_half_never_signs_and_still_verifies_everywhere() {
        let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let at = |mins: i64| Timestamp::from_millis(t0.millis() + mins * 60_000).unwrap();
        let old = StoredKey::generate("old".into(), at(-100)).unwrap();
        let signed = Signer::from_keys(std::slice::from_ref(&old))
            .unwrap()
            .sign_jws(b"{}");
        // Retired just now, and already without its private half (a hand-made set): within
        // the 10 minutes a retired key would still sign, it does not.
        let mut headless = old.public_only().unwrap();
        headless.status = KeyStatus::Retired;
        headless.retired_at = Some(at(0));
        let new = StoredKey::generate("new".into(), at(0)).unwrap();
        let set = KeySet::new(&[headless.clone(), new.clone()]).unwrap();
        assert_eq!(set.signing(at(1)).kid, "new");
        // The published set (the management API's, on AWS) verifies what it signed.
        let signer = Signer::from_keys(&[headless, new]).unwrap();
        let published = PublishedKeys::from_keys(&signer.public_keys()).unwrap();
        assert!(published.verify_jws(&signed) && signer.verify_jws(&signed));
        assert_eq!(
            signer.jwks()["keys"][0]["retiredAt"],
            "2026-01-01T00:00:00Z"
        );
        assert!(signer.jwks()["keys"][1].get("retiredAt").is_none());
    }

    #[test]
    fn a_key_file_of_the_old_shape_loads() {
        let key = StoredKey::generate("k".into(), Timestamp::now()).unwrap();
        let pkcs8 = key.pkcs8.unwrap();
        let old = format!(
            r#"[{{"kid": "k", "status": "active", "pkcs8": "{pkcs8}", "createdAt": "2026-01-01T00:00:00Z"}}]"#
        );
        let keys: Vec<StoredKey> = serde_json::from_str(&old).unwrap();
        assert_eq!(Signer::from_keys(&keys).unwrap().kid(), "k");
    }

    #[test]
    fn a_set_keeps_its_newest_retired_keys_only() {
        let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let day = |d: i64| Timestamp::from_millis(t0.millis() + d * 86_400_000).unwrap();
        let key = StoredKey::generate("k0".into(), day(0)).unwrap();
        let mut keys = vec![key.clone()];
        let mut dropped = Vec::new();
        for d in 1..=(MAX_RETIRED_KEYS as i64 + 3) {
            let new = StoredKey {
                kid: format!("k{d}"),
                created_at: day(d),
                ..key.clone()
            };
            let next = rotate(&keys, new, day(d));
            dropped.extend(dropped_kids(&keys, &next));
            keys = next;
        }
        assert_eq!(
            dropped,
            ["k0", "k1", "k2"],
            "each rotation past the cap names its drop"
        );
        assert_eq!(keys.len(), MAX_RETIRED_KEYS + 1);
        assert_eq!(keys[0].kid, "k3", "the oldest three were dropped");
        assert_eq!(keys.last().unwrap().status, KeyStatus::Active);
    }

    #[test]
    fn replacing_keys_changes_what_is_published() {
        let s = test_signer();
        let jws = s.sign_jws(b"{}");
        let t = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let keys = rotate(
            &s.stored_keys(),
            StoredKey::generate("k2".into(), t).unwrap(),
            Timestamp::now(),
        );
        s.replace_keys(&keys).unwrap();
        let kids: Vec<String> = s.jwks()["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(kids, ["k1", "k2"]);
        assert!(
            s.verify_jws(&jws),
            "signatures of the retired key still verify"
        );
        assert!(s.replace_keys(&[]).is_err());
    }

    #[test]
    fn rejects_malformed_jws() {
        assert_eq!(decode_jws_payload("a.b"), Err(JwsError::Shape));
        assert_eq!(decode_jws_payload("a.!!.c"), Err(JwsError::Base64));
        assert_eq!(decode_jws_payload("a.bm90IGpzb24.c"), Err(JwsError::Json));
    }
}
