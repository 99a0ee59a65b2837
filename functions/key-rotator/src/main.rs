//! key-rotator (EventBridge, hourly): rotates the signing keys in their secret when the
//! active key is KEY_ROTATION_DAYS old. The new key is published at once and signs ten
//! minutes later; every warm function reloads its keys within five.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let rotation = pricing_lambda::key_rotation_from_env();
    pricing_lambda::initialized("key-rotator", started);
    lambda_runtime::run(service_fn(|_event: LambdaEvent<EventBridgeEvent>| async {
        let Some(max_age) = rotation else {
            return Ok::<_, Error>(None);
        };
        Ok(aws.rotate_keys_if_due(max_age).await?)
    }))
    .await
}
