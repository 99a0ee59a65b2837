//! scheduler (EventBridge, every minute): the repair sweeps (log tails, undispatched
//! events, lost deliveries), deactivations, the scheduled price calculations that are due,
//! and the rotation of the signing keys when the active one is old enough.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::handlers::scheduler_run;
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let rotation = pricing_lambda::key_rotation_from_env();
    pricing_lambda::initialized("scheduler", started);
    lambda_runtime::run(service_fn(|_event: LambdaEvent<EventBridgeEvent>| async {
        let report = scheduler_run(&aws.store, &aws.queues).await?;
        if let Some(max_age) = rotation {
            aws.rotate_keys_if_due(max_age).await?;
        }
        Ok::<_, Error>(report)
    }))
    .await
}
