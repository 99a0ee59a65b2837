//! Cold-start wiring: configuration and SDK clients are built once per process and shared
//! by every invocation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use pricing_api::auth::Authenticator;
use pricing_api::{App, Stores};
use pricing_aws::{Config, DynamoStore, Queues, sdk_config};
use pricing_core::jws::Signer;

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
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config.table_name);
        let queues = Queues::new(&aws_sdk_sqs::Client::new(&sdk), &config);
        Aws {
            config,
            sdk,
            store,
            queues,
        }
    }

    /// The service's signing keys from Secrets Manager (the first cold start stores one).
    pub async fn signer(&self) -> Result<Signer, StartError> {
        Signer::from_keys(&self.load_keys().await?).map_err(|e| StartError::Keys(e.to_string()))
    }

    async fn load_keys(&self) -> Result<Vec<pricing_core::jws::StoredKey>, StartError> {
        let client = aws_sdk_secretsmanager::Client::new(&self.sdk);
        pricing_aws::secrets::load_or_bootstrap_signing_keys(
            &client,
            &self.config.signing_keys_secret_id,
        )
        .await
        .map_err(|e| StartError::Keys(e.to_string()))
    }

    /// Rotates the signing keys when the active one is older than `max_age` (the
    /// scheduler's job); the new key's kid when it did.
    pub async fn rotate_keys_if_due(&self, max_age: Duration) -> Result<Option<String>, String> {
        let client = aws_sdk_secretsmanager::Client::new(&self.sdk);
        pricing_aws::secrets::rotate_signing_keys_if_due(
            &client,
            &self.config.signing_keys_secret_id,
            max_age,
            pricing_core::time::Timestamp::now(),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// The signing keys, kept fresh: see [`Keys::refresh`].
    pub async fn keys(&self) -> Result<Keys, StartError> {
        Ok(Keys {
            signer: Arc::new(self.signer().await?),
            aws: self.clone(),
            loaded: Arc::new(Mutex::new(Instant::now())),
        })
    }

    /// The HTTP API over these adapters, trusting the JWT authorizer's claims, with keys
    /// that follow rotations.
    pub async fn api_router(&self) -> Result<Router, StartError> {
        let keys = self.keys().await?;
        let signer = keys.signer.clone();
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
        Ok(pricing_api::router(Arc::new(App::new(ports, signer, auth))).layer(refresh))
    }
}

/// How often a warm function reloads its keys. Shorter than
/// `pricing_core::jws::KEY_PROPAGATION`, so a rotated key is published by every function
/// before any function signs with it.
pub const KEY_REFRESH: Duration = Duration::from_secs(5 * 60);

/// The signing keys of a warm function and when they were loaded.
#[derive(Clone)]
pub struct Keys {
    pub signer: Arc<Signer>,
    aws: Aws,
    loaded: Arc<Mutex<Instant>>,
}

impl Keys {
    /// Reloads the key set from the secret if it is older than [`KEY_REFRESH`]. A failed
    /// reload keeps the current set (and is retried at the next call).
    pub async fn refresh(&self) {
        {
            let mut loaded = self
                .loaded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if loaded.elapsed() < KEY_REFRESH {
                return;
            }
            *loaded = Instant::now();
        }
        self.load().await;
    }

    /// Reloads the key set from the secret now.
    pub async fn reload(&self) {
        *self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        self.load().await;
    }

    async fn load(&self) {
        match self.aws.load_keys().await {
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
