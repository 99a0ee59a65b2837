//! webhook-delivery (SQS): attempts signed webhooks and runs manual triggers. A retry
//! hides its message until the next attempt is due; a final failure goes on to the
//! dead-letter queue (partial batch failures). It reads the signing keys (it signs
//! webhooks) and never writes them.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use pricing_core::webhooks::CallbackPolicy;
use pricing_http::HttpTransport;
use pricing_lambda::handlers::webhook_batch;
use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let keys = aws.keys().await?;
    // On AWS callbacks must be https and resolve to public addresses.
    let transport = HttpTransport::new(CallbackPolicy::STRICT)?;
    pricing_lambda::initialized("webhook-delivery", started);
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async {
        keys.refresh().await;
        Ok::<SqsBatchResponse, Error>(
            webhook_batch(
                &aws.store,
                &aws.queues,
                &transport,
                &keys.signer,
                event.payload,
            )
            .await,
        )
    }))
    .await
}
