//! entry-processor (SQS FIFO, group = instance): applies each woken instance's log tail;
//! failed messages are reported as partial batch failures. Each invocation ends with its
//! metrics as EMF lines on stdout.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_core::process::Processor;
use pricing_lambda::handlers::{time_left, work_batch};
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let processor = Processor::new();
    pricing_lambda::initialized("entry-processor", started);
    let (processor, aws) = (&processor, &aws);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        // Read before the batch starts: the records are handled within it.
        let time = time_left(event.context.deadline);
        async move {
            Ok::<SqsBatchResponse, Error>(
                work_batch(
                    processor,
                    &aws.store,
                    &aws.queues,
                    event.payload,
                    Some(time),
                )
                .await,
            )
        }
    }))
    .await
}
