//! The data directory: database, signing keys, the token secret and local OAuth clients.
//! Every secret file is written with mode 0600 and never logged.

use std::path::{Path, PathBuf};

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use pricing_api::auth::LocalTokens;
use pricing_embedded::EmbeddedError;
use pricing_embedded::keys::load_or_create_private_file;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::cli::TokenArgs;

const TOKEN_SECRET_FILE: &str = "token-secret";
const CLIENTS_FILE: &str = "clients.json";
/// Tenant of the client created on first start.
pub const LOCAL_TENANT: &str = "local";

pub fn ensure_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::DataDir {
        path: dir.display().to_string(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| Error::DataDir {
                path: dir.display().to_string(),
                source,
            },
        )?;
    }
    Ok(())
}

fn random_bytes(n: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| Error::Setup("the system random source failed".into()))?;
    Ok(buf)
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Setup(format!("{what}: {e}"))
}

/// The HS256 secret of standalone tokens: created once (also when `serve` and `token` race
/// on a fresh directory), kept across restarts.
pub fn token_secret(dir: &Path) -> Result<Vec<u8>, Error> {
    let path = dir.join(TOKEN_SECRET_FILE);
    let (bytes, _) = load_or_create_private_file(&path, || {
        let secret = random_bytes(32).map_err(|e| EmbeddedError::Invalid {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        Ok(B64.encode(secret).into_bytes())
    })
    .map_err(setup("the token secret"))?;
    B64.decode(bytes.trim_ascii())
        .map_err(setup("the token secret file is damaged"))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Client {
    client_id: String,
    /// SHA-256 of the secret, base64url; the secret itself is shown once and not kept.
    secret_sha256: String,
    tenant: String,
}

/// OAuth clients allowed to use `POST /oauth2/token`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Clients {
    clients: Vec<Client>,
}

fn hash_secret(secret: &str) -> String {
    B64.encode(digest(&SHA256, secret.as_bytes()).as_ref())
}

/// A client created now; its secret is printed once.
pub struct NewClient {
    pub client_id: String,
    pub client_secret: String,
    pub tenant: String,
}

impl Clients {
    fn path(dir: &Path) -> PathBuf {
        dir.join(CLIENTS_FILE)
    }

    /// Loads the clients; on the first start creates the local client and returns it.
    pub fn load_or_create(dir: &Path) -> Result<(Clients, Option<NewClient>), Error> {
        let path = Self::path(dir);
        let mut fresh = None;
        let (bytes, created) = load_or_create_private_file(&path, || {
            let invalid = |detail: String| EmbeddedError::Invalid {
                path: path.clone(),
                detail,
            };
            let random = |n| random_bytes(n).map_err(|e| invalid(e.to_string()));
            let client = NewClient {
                client_id: format!("local-{}", B64.encode(random(6)?)),
                client_secret: B64.encode(random(24)?),
                tenant: LOCAL_TENANT.into(),
            };
            let clients = Clients {
                clients: vec![Client {
                    client_id: client.client_id.clone(),
                    secret_sha256: hash_secret(&client.client_secret),
                    tenant: client.tenant.clone(),
                }],
            };
            fresh = Some(client);
            serde_json::to_vec_pretty(&clients).map_err(|e| invalid(e.to_string()))
        })
        .map_err(setup("the clients file"))?;
        let clients =
            serde_json::from_slice(&bytes).map_err(setup("the clients file is damaged"))?;
        Ok((clients, if created { fresh } else { None }))
    }

    /// The tenant of a client whose secret matches.
    pub fn authenticate(&self, client_id: &str, secret: &str) -> Option<&str> {
        let offered = hash_secret(secret);
        self.clients
            .iter()
            .find(|c| c.client_id == client_id)
            .filter(|c| constant_time_eq(c.secret_sha256.as_bytes(), offered.as_bytes()))
            .map(|c| c.tenant.as_str())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `standalone token`: prints a token for a tenant as the last line of stdout.
pub fn print_token(args: &TokenArgs) -> Result<(), Error> {
    if pricing_core::ids::TenantId::from_claim(&args.tenant).is_none() {
        return Err(Error::Setup("--tenant must be 1 to 256 characters".into()));
    }
    ensure_dir(&args.data)?;
    let tokens = LocalTokens::new(&token_secret(&args.data)?);
    let token = tokens
        .issue(&args.tenant, args.ttl)
        .map_err(setup("signing the token"))?;
    println!("{token}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_created_once_and_secrets_are_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let (clients, created) = Clients::load_or_create(dir.path()).unwrap();
        let created = created.expect("first start creates a client");
        assert_eq!(
            clients.authenticate(&created.client_id, &created.client_secret),
            Some(LOCAL_TENANT)
        );
        assert_eq!(clients.authenticate(&created.client_id, "wrong"), None);
        let stored = std::fs::read_to_string(dir.path().join(CLIENTS_FILE)).unwrap();
        assert!(!stored.contains(&created.client_secret));
        let (_, again) = Clients::load_or_create(dir.path()).unwrap();
        assert!(again.is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(CLIENTS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn concurrent_first_starts_agree_on_the_token_secret() {
        // `serve` and `token` on a fresh directory at the same moment must not end up with
        // different secrets (tokens of one would be refused by the other).
        let dir = tempfile::tempdir().unwrap();
        let secrets: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| token_secret(dir.path()).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(secrets.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(secrets[0], token_secret(dir.path()).unwrap());
    }

    #[test]
    fn the_token_secret_survives_restarts() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            token_secret(dir.path()).unwrap(),
            token_secret(dir.path()).unwrap()
        );
    }
}
