//! Cold-start wiring: configuration and SDK clients are built once per process and shared
//! by every invocation.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use pricing_api::app::ServiceKeys;
use pricing_api::auth::Authenticator;
use pricing_api::{App, Stores};
use pricing_aws::dynamo::DynamoRateLimit;
use pricing_aws::secrets::{self, FIRST_KEY_WAIT, KeyMaintenance, SecretsError};
use pricing_aws::{Config, DynamoStore, Queues, sdk_config};
use pricing_core::jws::{PublicKey, PublishedKeys, Signer, StoredKey};

use crate::StartError;
use crate::auth::AuthorizerClaims;

/// The stack's adapters, built from the environment the template sets.
#[derive(Clone)]
pub struct Aws {
    pub config: Config,
    pub sdk: aws_config::SdkConfig,
    pub store: DynamoStore,
    /// Producers send through this: each kind of message to its queue.
    pub queues: Queues,
}

impl Aws {
    /// From the process environment (TABLE_NAME, PROCESS_QUEUE_URL, ...).
    pub async fn from_env() -> Result<Self, StartError> {
        Self::from_config(Config::from_env()?).await
    }

    pub async fn from_config(config: Config) -> Result<Self, StartError> {
        let sdk = sdk_config(config.endpoint_url.as_deref()).await;
        Ok(Self::with_sdk(config, sdk))
    }

    /// With a given SDK configuration (tests on the emulator pass theirs).
    pub fn with_sdk(config: Config, sdk: aws_config::SdkConfig) -> Self {
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config.table_name)
            .with_retention(config.retention);
        let queues = Queues::new(&aws_sdk_sqs::Client::new(&sdk), &config);
        Aws {
            config,
            sdk,
            store,
            queues,
        }
    }

    fn secrets(&self) -> aws_sdk_secretsmanager::Client {
        aws_sdk_secretsmanager::Client::new(&self.sdk)
    }

    /// The service's signing keys from their secret, read only (entries-api signs entries,
    /// webhook-delivery signs webhooks). Before the key-rotator has stored a first key this
    /// waits a few seconds, then fails, saying so.
    pub async fn signer(&self) -> Result<Signer, StartError> {
        Signer::from_keys(&self.load_keys(FIRST_KEY_WAIT).await?)
            .map_err(|e| StartError::Keys(e.to_string()))
    }

    async fn load_keys(&self, wait: Duration) -> Result<Vec<StoredKey>, StartError> {
        secrets::load_signing_keys(&self.secrets(), &self.config.signing_keys_secret_id, wait)
            .await
            .map_err(|e| StartError::Keys(e.to_string()))
    }

    async fn load_public_keys(&self, wait: Duration) -> Result<Vec<PublicKey>, StartError> {
        secrets::load_public_keys(&self.secrets(), &self.config.public_keys_secret_id, wait)
            .await
            .map_err(|e| StartError::Keys(e.to_string()))
    }

    /// The key-rotator's work (the only writer of the secrets): stores a first key when
    /// there is none, rotates when the active key is older than `max_age` (never when
    /// `None`), and publishes the public keys.
    pub async fn maintain_keys(
        &self,
        max_age: Option<Duration>,
    ) -> Result<KeyMaintenance, SecretsError> {
        secrets::maintain_signing_keys(
            &self.secrets(),
            &self.config.signing_keys_secret_id,
            &self.config.public_keys_secret_id,
            max_age,
            pricing_core::time::Timestamp::now(),
        )
        .await
    }

    /// The signing keys, kept fresh: see [`Keys::refresh`].
    pub async fn keys(&self) -> Result<Keys, StartError> {
        Ok(Keys {
            signer: Arc::new(self.signer().await?),
            aws: self.clone(),
            loaded: Loaded::now(),
        })
    }

    /// The public keys only, kept fresh like [`Keys`] (the management API).
    pub async fn public_keys(&self) -> Result<PublicKeys, StartError> {
        let keys = self.load_public_keys(FIRST_KEY_WAIT).await?;
        Ok(PublicKeys {
            keys: Arc::new(
                PublishedKeys::from_keys(&keys).map_err(|e| StartError::Keys(e.to_string()))?,
            ),
            aws: self.clone(),
            loaded: Loaded::now(),
        })
    }

    /// The entries-api function's routes (the entry log; `pricing_api::entries_router`)
    /// with the signing keys (it signs the entries it takes), trusting the JWT authorizer's
    /// claims, with keys that follow rotations.
    pub async fn api_router(&self) -> Result<Router, StartError> {
        let keys = self.keys().await?;
        let signer = keys.signer.clone();
        let router = self.router(Part::Entries, signer.clone(), keys);
        Ok(with_metrics_flush(router, Some(signer)))
    }

    /// The management-api function's routes (every other one;
    /// `pricing_api::management_router`) with the public keys only: it publishes the key
    /// set and never signs.
    pub async fn management_router(&self) -> Result<Router, StartError> {
        let keys = self.public_keys().await?;
        let router = self.router(Part::Management, keys.keys.clone(), keys);
        Ok(with_metrics_flush(router, None))
    }

    /// The simulations-api function's route (`POST /simulations`;
    /// `pricing_api::simulations_router`), with the public keys (it signs and publishes
    /// nothing, but the API's state holds a key set): the management-api no longer links
    /// the market simulator.
    pub async fn simulations_router(&self) -> Result<Router, StartError> {
        let keys = self.public_keys().await?;
        let router = self.router(Part::Simulations, keys.keys.clone(), keys);
        Ok(with_metrics_flush(router, None))
    }

    fn router(
        &self,
        part: Part,
        service_keys: impl Into<ServiceKeys>,
        keys: impl Refresh,
    ) -> Router {
        let auth: Arc<dyn Authenticator> = Arc::new(AuthorizerClaims);
        let ports = Stores {
            store: self.store.clone(),
            queue: self.queues.clone(),
        };
        // Keys are refreshed before a request is answered (a no-op most of the time), not
        // in the background: a frozen environment runs no timers, and after a thaw the
        // key endpoint must not answer from a stale set.
        let refresh = axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let keys = keys.clone();
                async move {
                    keys.refresh().await;
                    next.run(request).await
                }
            },
        );
        let mut app = App::new(ports, service_keys, auth).with_quotas(self.config.quotas);
        if let Some(window) = self.config.rate_limit {
            app = app.with_rate_limit(DynamoRateLimit::new(&self.store, window));
        }
        let app = Arc::new(app);
        match part {
            Part::Entries => pricing_api::entries_router(app),
            Part::Management => pricing_api::management_router(app),
            Part::Simulations => pricing_api::simulations_router(app),
        }
        .layer(refresh)
    }
}

/// After each request (one invocation of an API function): the signing key's age where
/// the function signs, then the invocation's metrics as EMF (`crate::metrics`).
fn with_metrics_flush(router: Router, signer: Option<Arc<Signer>>) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let signer = signer.clone();
            async move {
                let response = next.run(request).await;
                if let Some(signer) = &signer {
                    let now = pricing_core::time::Timestamp::now();
                    pricing_api::metrics::record_signing_key_age(signer, now);
                }
                crate::metrics::flush();
                response
            }
        },
    ))
}

/// Which function's part of the API a router serves.
enum Part {
    Entries,
    Management,
    Simulations,
}

/// How often a warm function reloads its keys. Shorter than
/// `pricing_core::jws::KEY_PROPAGATION`, so a rotated key is published by every function
/// before any function signs with it.
pub const KEY_REFRESH: Duration = Duration::from_secs(5 * 60);

/// When a warm function last loaded its keys.
#[derive(Clone)]
struct Loaded(Arc<Mutex<Instant>>);

impl Loaded {
    fn now() -> Self {
        Loaded(Arc::new(Mutex::new(Instant::now())))
    }

    /// Whether a reload is due ([`KEY_REFRESH`]); if so, counts it as done now (a failed
    /// reload is retried at the next due time, not at every request).
    fn due(&self) -> bool {
        let mut loaded = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if loaded.elapsed() < KEY_REFRESH {
            return false;
        }
        *loaded = Instant::now();
        true
    }

    fn touch(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }
}

/// Keys a warm function reloads from their secret.
pub trait Refresh: Clone + Send + Sync + 'static {
    /// Reloads the keys if they are older than [`KEY_REFRESH`]; a failed reload keeps the
    /// current set.
    fn refresh(&self) -> impl Future<Output = ()> + Send;
}

/// The signing keys of a warm function and when they were loaded.
#[derive(Clone)]
pub struct Keys {
    pub signer: Arc<Signer>,
    aws: Aws,
    loaded: Loaded,
}

impl Keys {
    /// Reloads the key set from the secret if it is older than [`KEY_REFRESH`]. A failed
    /// reload keeps the current set (and is retried at the next due time).
    pub async fn refresh(&self) {
        if self.loaded.due() {
            self.load().await;
        }
    }

    /// Reloads the key set from the secret now.
    pub async fn reload(&self) {
        self.loaded.touch();
        self.load().await;
    }

    async fn load(&self) {
        match self.aws.load_keys(Duration::ZERO).await {
            Ok(keys) => match self.signer.replace_keys(&keys) {
                Ok(()) => tracing::debug!(keys = keys.len(), "signing keys reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "the secret holds no usable key set; keeping the current one")
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "reloading the signing keys failed; keeping the current ones")
            }
        }
    }
}

impl Refresh for Keys {
    async fn refresh(&self) {
        Keys::refresh(self).await;
    }
}

/// The public keys of a warm function that never signs, and when they were loaded.
#[derive(Clone)]
pub struct PublicKeys {
    pub keys: Arc<PublishedKeys>,
    aws: Aws,
    loaded: Loaded,
}

impl PublicKeys {
    /// Reloads the public keys from their secret now.
    pub async fn reload(&self) {
        self.loaded.touch();
        self.load().await;
    }

    async fn load(&self) {
        match self.aws.load_public_keys(Duration::ZERO).await {
            Ok(keys) => match self.keys.replace_keys(&keys) {
                Ok(()) => tracing::debug!(keys = keys.len(), "public keys reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "the secret holds no usable public key set; keeping the current one")
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "reloading the public keys failed; keeping the current ones")
            }
        }
    }
}

impl Refresh for PublicKeys {
    async fn refresh(&self) {
        if self.loaded.due() {
            self.load().await;
        }
    }
}
