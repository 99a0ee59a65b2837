//! The service's keys in Secrets Manager, in two secrets that template.yaml creates as `[]`:
//!
//! - the signing keys: a JSON list of `StoredKey` (PKCS#8 in base64; a key retired long
//!   ago keeps only its public point, `pricing_core::jws::rotate`). The functions that
//!   sign read it (entries-api signs entries, webhook-delivery signs webhooks); only the
//!   key-rotator writes it.
//! - the public keys: a JSON list of `PublicKey` (JWK coordinates and the keys' life),
//!   derived from the signing keys by the key-rotator after every change. The management
//!   API reads only this one: it serves the key set and holds no private key.
//!
//! Bootstrap: the key-rotator stores the first key ([`maintain_signing_keys`]): at deploy
//! (template.yaml's custom resource invokes it before the API functions are created) and
//! on every scheduled run that finds the list empty (an operator reset it). The other
//! functions never write: a cold start that finds no key waits a few seconds
//! ([`load_signing_keys`], [`load_public_keys`]) and then fails, saying so; the next
//! invocation tries again.
//!
//! Concurrent bootstraps converge: each one that finds the list empty puts a fresh key
//! with the same ClientRequestToken, derived from the version id of the empty value they
//! read. Secrets Manager creates one version for a token; a second put with that token and
//! other content fails (ResourceExistsException) and the loser reads the winner's key.
//! Deriving the token from the empty version (rather than one constant for ever) lets an
//! operator reset the secret to `[]` and have a new key bootstrapped. Key material is never
//! logged (`StoredKey`'s Debug shows the kid only).

use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use pricing_core::jws::{KeyError, PublicKey, PublishedKeys, Signer, StoredKey};
use pricing_core::time::Timestamp;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::error::code;

/// The token of the bootstrap put when the empty value has no version id; otherwise
/// the prefix of a token derived from that id.
pub const BOOTSTRAP_TOKEN: &str = "5d1c8a4e-6b0f-4c3e-9a57-2f8e1d7c0b93";
/// Reads after a lost bootstrap race that may still see the empty value.
const READS_AFTER_RACE: u32 = 5;
/// How long a cold start waits for the key-rotator's first key before it fails.
pub const FIRST_KEY_WAIT: Duration = Duration::from_secs(5);
/// Turns of [`publish_public_keys`] when rotations keep landing while it publishes.
const PUBLISH_ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("cannot read secret {secret_id}: {message}")]
    Read { secret_id: String, message: String },
    #[error("cannot store signing keys in secret {secret_id}: {message}")]
    Write { secret_id: String, message: String },
    #[error("secret {secret_id} is not a JSON list of signing keys: {message}")]
    Invalid { secret_id: String, message: String },
    #[error("secret {secret_id} holds no usable signing key: {source}")]
    Keys {
        secret_id: String,
        #[source]
        source: KeyError,
    },
    #[error("secret {secret_id} is still empty after storing a first key")]
    StillEmpty { secret_id: String },
    #[error(
        "secret {secret_id} holds no key yet: the key-rotator function stores the first one \
         (at deploy through the stack's SigningKeyBootstrap resource, and on each hourly run \
         while the list is empty); invoke it once if it has not run"
    )]
    NoKeyYet { secret_id: String },
}

/// The signing keys stored in `secret_id`, read only (the functions that sign). An empty
/// list is read again for up to `wait` (the key-rotator may be storing the first key),
/// then refused with [`SecretsError::NoKeyYet`].
pub async fn load_signing_keys(
    client: &Client,
    secret_id: &str,
    wait: Duration,
) -> Result<Vec<StoredKey>, SecretsError> {
    let keys = wait_for_keys::<StoredKey>(client, secret_id, wait).await?;
    checked(secret_id, keys)
}

/// The public keys stored in `secret_id`, read only (the management API), waiting like
/// [`load_signing_keys`].
pub async fn load_public_keys(
    client: &Client,
    secret_id: &str,
    wait: Duration,
) -> Result<Vec<PublicKey>, SecretsError> {
    let keys = wait_for_keys::<PublicKey>(client, secret_id, wait).await?;
    PublishedKeys::from_keys(&keys).map_err(|source| SecretsError::Keys {
        secret_id: secret_id.to_owned(),
        source,
    })?;
    Ok(keys)
}

async fn wait_for_keys<T: DeserializeOwned>(
    client: &Client,
    secret_id: &str,
    wait: Duration,
) -> Result<Vec<T>, SecretsError> {
    let deadline = Instant::now() + wait;
    let mut delay = Duration::from_millis(100);
    loop {
        let (keys, _) = read::<T>(client, secret_id).await?;
        if !keys.is_empty() {
            return Ok(keys);
        }
        if Instant::now() + delay > deadline {
            return Err(SecretsError::NoKeyYet {
                secret_id: secret_id.to_owned(),
            });
        }
        tracing::info!(secret_id, "no key stored yet; waiting for the key-rotator");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// What [`maintain_signing_keys`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyMaintenance {
    /// The kids of the signing keys afterwards.
    pub kids: Vec<String>,
    /// The kid of the key a rotation added.
    pub rotated: Option<String>,
    /// Whether the public keys were written (a rotation always writes them).
    pub published: bool,
}

/// The key-rotator's work, idempotent: stores a first signing key if there is none,
/// rotates when the active key is older than `max_age` (never when `None`), and publishes
/// the public keys of what is stored.
pub async fn maintain_signing_keys(
    client: &Client,
    signing_secret_id: &str,
    public_secret_id: &str,
    max_age: Option<Duration>,
    now: Timestamp,
) -> Result<KeyMaintenance, SecretsError> {
    load_or_bootstrap_signing_keys(client, signing_secret_id).await?;
    let rotated = match max_age {
        Some(max_age) => {
            rotate_signing_keys_if_due(
                client,
                signing_secret_id,
                Some(public_secret_id),
                max_age,
                now,
            )
            .await?
        }
        None => None,
    };
    // A rotation published its set before storing it; this publishes what is stored (the
    // first key, a rotation another run stored, a repair).
    let published = publish_public_keys(client, signing_secret_id, public_secret_id).await?
        || rotated.is_some();
    let (keys, _) = read::<StoredKey>(client, signing_secret_id).await?;
    Ok(KeyMaintenance {
        kids: keys.into_iter().map(|k| k.kid).collect(),
        rotated,
        published,
    })
}

/// Writes the public halves of the signing keys in `signing_secret_id` to
/// `public_secret_id` unless it holds them already; true when it wrote. Publishes what is
/// current: when a rotation lands meanwhile (the signing keys' version changed), it
/// publishes again.
pub async fn publish_public_keys(
    client: &Client,
    signing_secret_id: &str,
    public_secret_id: &str,
) -> Result<bool, SecretsError> {
    let mut wrote = false;
    for _ in 0..PUBLISH_ATTEMPTS {
        let (keys, version) = read::<StoredKey>(client, signing_secret_id).await?;
        if keys.is_empty() {
            return Ok(wrote);
        }
        wrote |= write_public_keys(client, signing_secret_id, public_secret_id, &keys).await?;
        let (_, now_version) = read::<StoredKey>(client, signing_secret_id).await?;
        if now_version == version {
            return Ok(wrote);
        }
    }
    Ok(wrote)
}

/// Writes the public halves of `keys` (read from `signing_secret_id`) to `public_secret_id`
/// unless it holds them already (an unreadable value is replaced); true when it wrote.
async fn write_public_keys(
    client: &Client,
    signing_secret_id: &str,
    public_secret_id: &str,
    keys: &[StoredKey],
) -> Result<bool, SecretsError> {
    let public = Signer::from_keys(keys)
        .map_err(|source| SecretsError::Keys {
            secret_id: signing_secret_id.to_owned(),
            source,
        })?
        .public_keys();
    let current = read::<PublicKey>(client, public_secret_id)
        .await
        .map(|(keys, _)| keys)
        .ok();
    if current.as_ref() == Some(&public) {
        return Ok(false);
    }
    let body = serde_json::to_string(&public).map_err(|e| SecretsError::Invalid {
        secret_id: public_secret_id.to_owned(),
        message: e.to_string(),
    })?;
    client
        .put_secret_value()
        .secret_id(public_secret_id)
        .secret_string(body)
        .send()
        .await
        .map_err(|e| SecretsError::Write {
            secret_id: public_secret_id.to_owned(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
    let kids: Vec<&str> = public.iter().map(|k| k.kid.as_str()).collect();
    tracing::info!(
        secret_id = public_secret_id,
        ?kids,
        "published the public keys"
    );
    Ok(true)
}

/// The signing keys stored in `secret_id`; when the list is empty, generates one key,
/// stores it and returns what is then stored. The keys are checked with
/// `Signer::from_keys` (an active key must be among them). Only the key-rotator calls
/// this (it alone may write the secret); the other functions use [`load_signing_keys`].
pub async fn load_or_bootstrap_signing_keys(
    client: &Client,
    secret_id: &str,
) -> Result<Vec<StoredKey>, SecretsError> {
    let (keys, version) = read::<StoredKey>(client, secret_id).await?;
    if !keys.is_empty() {
        return checked(secret_id, keys);
    }

    let now = Timestamp::now();
    let random = ulid::Ulid::new().random() & 0xffff_ffff;
    let kid = format!("k{}-{random:08x}", now.0.format("%Y%m%d"));
    let key = StoredKey::generate(kid, now).map_err(|source| SecretsError::Keys {
        secret_id: secret_id.to_owned(),
        source,
    })?;
    let body = serde_json::to_string(&[&key]).map_err(|e| SecretsError::Invalid {
        secret_id: secret_id.to_owned(),
        message: e.to_string(),
    })?;
    let put = client
        .put_secret_value()
        .secret_id(secret_id)
        .secret_string(body)
        .client_request_token(bootstrap_token(version.as_deref()))
        .send()
        .await;
    match put {
        Ok(_) => {
            tracing::info!(secret_id, kid = %key.kid, "stored a first signing key");
            return checked(secret_id, vec![key]);
        }
        // Another cold start stored its key under the same token first.
        Err(e) if code(&e) == Some("ResourceExistsException") => {
            tracing::info!(secret_id, "another instance stored the first signing key");
        }
        Err(e) => {
            return Err(SecretsError::Write {
                secret_id: secret_id.to_owned(),
                message: DisplayErrorContext(&e).to_string(),
            });
        }
    }
    for attempt in 0..READS_AFTER_RACE {
        let (keys, _) = read::<StoredKey>(client, secret_id).await?;
        if !keys.is_empty() {
            return checked(secret_id, keys);
        }
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    Err(SecretsError::StillEmpty {
        secret_id: secret_id.to_owned(),
    })
}

/// Rotates the signing keys in `secret_id` when the newest active key is older than
/// `max_age` (see `pricing_core::jws::rotate`); returns the new key's kid, or `None` when
/// no rotation was due. With `publish_to`, the rotated set's public keys are written there
/// first, so a key can sign only once the public secret has listed it. Concurrent
/// schedulers converge like cold starts do: the put's ClientRequestToken derives from the
/// version read, so only one rotation of a version is stored and the others see theirs
/// refused (and report nothing done; [`publish_public_keys`] then publishes what is
/// stored).
pub async fn rotate_signing_keys_if_due(
    client: &Client,
    secret_id: &str,
    publish_to: Option<&str>,
    max_age: Duration,
    now: Timestamp,
) -> Result<Option<String>, SecretsError> {
    let (keys, version) = read::<StoredKey>(client, secret_id).await?;
    let newest_active = keys
        .iter()
        .filter(|k| k.status == pricing_core::jws::KeyStatus::Active)
        .map(|k| k.created_at.millis())
        .max();
    let Some(created) = newest_active else {
        // Nothing to rotate yet: the bootstrap stores a first key.
        return Ok(None);
    };
    let age_ms = now.millis().saturating_sub(created);
    if u128::try_from(age_ms).unwrap_or(0) < max_age.as_millis() {
        return Ok(None);
    }
    let random = ulid::Ulid::new().random() & 0xffff_ffff;
    let kid = format!("k{}-{random:08x}", now.0.format("%Y%m%d"));
    let key = StoredKey::generate(kid.clone(), now).map_err(|source| SecretsError::Keys {
        secret_id: secret_id.to_owned(),
        source,
    })?;
    let rotated = checked(secret_id, pricing_core::jws::rotate(&keys, key, now))?;
    let dropped = pricing_core::jws::dropped_kids(&keys, &rotated);
    if !dropped.is_empty() {
        tracing::warn!(secret_id, dropped = ?dropped, kept = pricing_core::jws::MAX_RETIRED_KEYS,
            "the rotation dropped the oldest retired keys: what they signed can no longer be verified");
    }
    if let Some(public_secret_id) = publish_to {
        write_public_keys(client, secret_id, public_secret_id, &rotated).await?;
    }
    let body = serde_json::to_string(&rotated).map_err(|e| SecretsError::Invalid {
        secret_id: secret_id.to_owned(),
        message: e.to_string(),
    })?;
    match client
        .put_secret_value()
        .secret_id(secret_id)
        .secret_string(body)
        .client_request_token(rotation_token(version.as_deref()))
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(secret_id, %kid, "rotated the signing keys");
            Ok(Some(kid))
        }
        Err(e) if code(&e) == Some("ResourceExistsException") => Ok(None),
        Err(e) => Err(SecretsError::Write {
            secret_id: secret_id.to_owned(),
            message: DisplayErrorContext(&e).to_string(),
        }),
    }
}

/// The ClientRequestToken of the rotation that replaces the version `version`: the same
/// for every run that read that version (so of two racing rotators one stores and the
/// other reads `ResourceExistsException`), and a fixed 55 characters whatever the version
/// id. Secrets Manager makes the token the new version's id, so a token that embedded the
/// version (truncated to the 64-character limit) would, after ten rotations, repeat an
/// earlier one and every later rotation would read as "another run rotated".
fn rotation_token(version: Option<&str>) -> String {
    let digest = Sha256::digest(version.unwrap_or("none").as_bytes());
    let hex: String = digest.iter().take(24).map(|b| format!("{b:02x}")).collect();
    format!("rotate-{hex}")
}

/// The ClientRequestToken (32 to 64 characters) of the put that fills the empty version
/// `version`: the same for every cold start that read that version.
fn bootstrap_token(version: Option<&str>) -> String {
    match version {
        Some(v) if !v.is_empty() => format!("{BOOTSTRAP_TOKEN}-{v}").chars().take(64).collect(),
        _ => BOOTSTRAP_TOKEN.to_owned(),
    }
}

/// The stored keys (signing or public) and the version id of the value read.
async fn read<T: DeserializeOwned>(
    client: &Client,
    secret_id: &str,
) -> Result<(Vec<T>, Option<String>), SecretsError> {
    let out = client
        .get_secret_value()
        .secret_id(secret_id)
        .send()
        .await
        .map_err(|e| SecretsError::Read {
            secret_id: secret_id.to_owned(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
    let text = out.secret_string().unwrap_or("").trim();
    let keys = if text.is_empty() {
        Vec::new()
    } else {
        // The error names the position only: serde_json never echoes the input here.
        serde_json::from_str::<Vec<T>>(text).map_err(|e| SecretsError::Invalid {
            secret_id: secret_id.to_owned(),
            message: format!(
                "line {} column {}: {:?}",
                e.line(),
                e.column(),
                e.classify()
            ),
        })?
    };
    Ok((keys, out.version_id))
}

fn checked(secret_id: &str, keys: Vec<StoredKey>) -> Result<Vec<StoredKey>, SecretsError> {
    Signer::from_keys(&keys).map_err(|source| SecretsError::Keys {
        secret_id: secret_id.to_owned(),
        source,
    })?;
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_tokens_are_valid_per_version_and_never_repeat_along_a_chain() {
        let mut version = "0b8f2a1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b".to_owned();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            let token = rotation_token(Some(&version));
            assert!((32..=64).contains(&token.len()), "{token}");
            assert_eq!(token, rotation_token(Some(&version)));
            assert!(seen.insert(token.clone()), "{token} repeats");
            version = token;
        }
        assert!((32..=64).contains(&rotation_token(None).len()));
    }

    #[test]
    fn bootstrap_tokens_are_valid_and_per_version() {
        let a = bootstrap_token(Some("0b8f2a1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"));
        let b = bootstrap_token(Some("1b8f2a1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"));
        assert_ne!(a, b);
        assert_eq!(
            a,
            bootstrap_token(Some("0b8f2a1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"))
        );
        for t in [a, b, bootstrap_token(None), bootstrap_token(Some("x"))] {
            assert!((32..=64).contains(&t.len()), "{t}");
        }
    }
}
