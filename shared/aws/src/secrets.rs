//! The service's signing keys in Secrets Manager: a JSON list of `StoredKey` (PKCS#8 in
//! base64). template.yaml creates the secret as `[]`; the first cold start stores a key.
//!
//! Concurrent cold starts converge: each one that finds the list empty puts a fresh key
//! with the same ClientRequestToken, derived from the version id of the empty value they
//! read. Secrets Manager creates one version for a token; a second put with that token and
//! other content fails (ResourceExistsException) and the loser reads the winner's key.
//! Deriving the token from the empty version (rather than one constant for ever) lets an
//! operator reset the secret to `[]` and have a new key bootstrapped. Key material is never
//! logged (`StoredKey`'s Debug shows the kid only).

use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::DisplayErrorContext;
use pricing_core::jws::{KeyError, Signer, StoredKey};
use pricing_core::time::Timestamp;

use crate::error::code;

/// The token of the bootstrap put when the empty value has no version id; otherwise
/// the prefix of a token derived from that id.
pub const BOOTSTRAP_TOKEN: &str = "5d1c8a4e-6b0f-4c3e-9a57-2f8e1d7c0b93";
/// Reads after a lost bootstrap race that may still see the empty value.
const READS_AFTER_RACE: u32 = 5;

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
}

/// The signing keys stored in `secret_id`; when the list is empty, generates one key,
/// stores it and returns what is then stored. The keys are checked with
/// `Signer::from_keys` (an active key must be among them).
pub async fn load_or_bootstrap_signing_keys(
    client: &Client,
    secret_id: &str,
) -> Result<Vec<StoredKey>, SecretsError> {
    let (keys, version) = read(client, secret_id).await?;
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
        let (keys, _) = read(client, secret_id).await?;
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
/// no rotation was due. Concurrent schedulers converge like cold starts do: the put's
/// ClientRequestToken derives from the version read, so only one rotation of a version is
/// stored and the others see theirs refused (and report nothing done).
pub async fn rotate_signing_keys_if_due(
    client: &Client,
    secret_id: &str,
    max_age: Duration,
    now: Timestamp,
) -> Result<Option<String>, SecretsError> {
    let (keys, version) = read(client, secret_id).await?;
    let newest_active = keys
        .iter()
        .filter(|k| k.status == pricing_core::jws::KeyStatus::Active)
        .map(|k| k.created_at.millis())
        .max();
    let Some(created) = newest_active else {
        // Nothing to rotate yet: the first cold start bootstraps a key.
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
    let body = serde_json::to_string(&rotated).map_err(|e| SecretsError::Invalid {
        secret_id: secret_id.to_owned(),
        message: e.to_string(),
    })?;
    let token: String = format!("rotate-{}", version.as_deref().unwrap_or("none"))
        .chars()
        .take(64)
        .collect();
    match client
        .put_secret_value()
        .secret_id(secret_id)
        .secret_string(body)
        .client_request_token(format!("{token:-<32}"))
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

/// The ClientRequestToken (32 to 64 characters) of the put that fills the empty version
/// `version`: the same for every cold start that read that version.
fn bootstrap_token(version: Option<&str>) -> String {
    match version {
        Some(v) if !v.is_empty() => format!("{BOOTSTRAP_TOKEN}-{v}").chars().take(64).collect(),
        _ => BOOTSTRAP_TOKEN.to_owned(),
    }
}

/// The stored keys and the version id of the value read.
async fn read(
    client: &Client,
    secret_id: &str,
) -> Result<(Vec<StoredKey>, Option<String>), SecretsError> {
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
        serde_json::from_str::<Vec<StoredKey>>(text).map_err(|e| SecretsError::Invalid {
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
