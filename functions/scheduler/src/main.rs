//! scheduler (EventBridge, every minute): the repair sweeps (log tails, undispatched
//! events, lost deliveries), then deactivations and the scheduled price calculations that
//! are due, tenant by tenant; each step within its share of the function's time.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::handlers::{run_time, scheduler_run};
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    pricing_lambda::initialized("scheduler", started);
    lambda_runtime::run(service_fn(|event: LambdaEvent<EventBridgeEvent>| {
        let time = run_time(event.context.deadline);
        let aws = &aws;
        async move {
            scheduler_run(&aws.store, &aws.queues, time)
                .await
                .map_err(Error::from)
        }
    }))
    .await
}
