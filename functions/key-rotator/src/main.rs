//! key-rotator: the only function that writes the key secrets. Hourly (EventBridge) it
//! rotates the signing keys when the active key is KEY_ROTATION_DAYS old; at deploy the
//! stack's custom resource has it store the first key; every run stores one if there is
//! none and publishes the public keys. A new key is published at once and signs ten
//! minutes later; every warm function reloads its keys within five.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::rotator::{http_client, key_rotator};
use pricing_lambda::wiring::Aws;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let rotation = pricing_lambda::key_rotation_from_env()?;
    let http = http_client()?;
    pricing_lambda::initialized("key-rotator", started);
    let (aws, http) = (&aws, &http);
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        key_rotator(aws, http, rotation, &event.payload)
            .await
            .map_err(Error::from)
    }))
    .await
}
