//! webhook-delivery (SQS): posts signed webhooks. Delivery arrives with the webhooks
//! milestone; until then every message is reported failed (and ends in the dead-letter
//! queue) rather than dropped.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_lambda::handlers::unsupported;
use pricing_lambda::sqs::handle_batch;
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    // Load the keys at cold start: a deployment without usable keys fails here, visibly.
    let _signer = aws.signer().await?;
    pricing_lambda::initialized("webhook-delivery", started);
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async {
        Ok::<SqsBatchResponse, Error>(
            handle_batch(event.payload, |m| unsupported("webhook-delivery", m)).await,
        )
    }))
    .await
}
