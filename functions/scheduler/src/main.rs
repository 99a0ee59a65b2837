//! scheduler (EventBridge, every minute): the repair sweeps (log tails, undispatched
//! events, lost deliveries), deactivations, and the scheduled price calculations that are
//! due.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::handlers::scheduler_run;
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    pricing_lambda::initialized("scheduler", started);
    lambda_runtime::run(service_fn(|_event: LambdaEvent<EventBridgeEvent>| async {
        scheduler_run(&aws.store, &aws.queues)
            .await
            .map_err(Error::from)
    }))
    .await
}
