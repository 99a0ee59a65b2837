//! Cold-start wiring: configuration and SDK clients are built once per process and shared
//! by every invocation.

use std::sync::Arc;

use axum::Router;
use pricing_api::auth::Authenticator;
use pricing_api::{App, Stores};
use pricing_aws::{Config, DynamoStore, Queues, SqsQueue, sdk_config};
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
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let queues = Queues {
            process: SqsQueue::new(sqs.clone(), &config.process_queue_url),
            recalc: SqsQueue::new(sqs, &config.recalc_queue_url),
        };
        Aws {
            config,
            sdk,
            store,
            queues,
        }
    }

    /// The service's signing keys from Secrets Manager (the first cold start stores one).
    pub async fn signer(&self) -> Result<Signer, StartError> {
        let client = aws_sdk_secretsmanager::Client::new(&self.sdk);
        let keys = pricing_aws::secrets::load_or_bootstrap_signing_keys(
            &client,
            &self.config.signing_keys_secret_id,
        )
        .await
        .map_err(|e| StartError::Keys(e.to_string()))?;
        Signer::from_keys(&keys).map_err(|e| StartError::Keys(e.to_string()))
    }

    /// The HTTP API over these adapters, trusting the JWT authorizer's claims.
    pub async fn api_router(&self) -> Result<Router, StartError> {
        let signer = Arc::new(self.signer().await?);
        let auth: Arc<dyn Authenticator> = Arc::new(AuthorizerClaims);
        let ports = Stores {
            store: self.store.clone(),
            queue: self.queues.clone(),
        };
        Ok(pricing_api::router(Arc::new(App::new(ports, signer, auth))))
    }
}
