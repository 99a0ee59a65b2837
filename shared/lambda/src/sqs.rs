//! SQS batches with partial failures: every message is handled on its own, and each one
//! that fails (or cannot be read) is reported, so SQS redelivers it and finally moves it to
//! the dead-letter queue. Nothing is swallowed.

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use pricing_core::model::Message;
use pricing_core::ports::WorkQueue;
use pricing_core::webhooks::Settle;

/// Handles each record's `Message`; failed and unreadable records are reported by id.
pub async fn handle_batch<F, Fut, E>(event: SqsEvent, mut handle: F) -> SqsBatchResponse
where
    F: FnMut(Message) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let message = read(&record);
        let outcome = match message {
            Ok(message) => handle(message).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("unreadable message: {e}")),
        };
        if let Err(error) = outcome {
            let attempt = record
                .attributes
                .get("ApproximateReceiveCount")
                .cloned()
                .unwrap_or_default();
            tracing::warn!(message_id = %id, %attempt, %error, "message failed; SQS will redeliver it");
            response.add_failure(id);
        }
    }
    response
}

/// The webhooks lane: like [`handle_batch`], but a message may ask to come back later. A
/// retry sets the message's visibility to the next attempt's delay and reports it failed,
/// so SQS keeps it and hands it out again then; a final failure sets visibility 0 and
/// reports it failed on every receive until the redrive policy moves it to the
/// dead-letter queue. `queue` is the queue the batch came from.
pub async fn handle_webhook_batch<Q, F, Fut>(
    event: SqsEvent,
    queue: &Q,
    handle: F,
) -> SqsBatchResponse
where
    Q: WorkQueue,
    F: Fn(Message) -> Fut,
    Fut: Future<Output = Result<Settle, String>>,
{
    // Concurrently: each attempt may wait up to 15 s for its receiver.
    let outcomes = futures_util::future::join_all(event.records.iter().map(|record| {
        let handle = &handle;
        async move {
            let outcome = match read(record) {
                Ok(message) => handle(message).await,
                Err(e) => Err(format!("unreadable message: {e}")),
            };
            (record, outcome)
        }
    }))
    .await;
    let mut response = SqsBatchResponse::default();
    for (record, outcome) in outcomes {
        let id = record.message_id.clone().unwrap_or_default();
        let again_in = match outcome {
            Ok(Settle::Done) => continue,
            Ok(Settle::RetryIn(delay)) => Some(delay),
            Ok(Settle::DeadLetter) => Some(Duration::ZERO),
            Err(error) => {
                tracing::warn!(message_id = %id, %error, "webhook message failed; SQS will redeliver it");
                None
            }
        };
        if let (Some(delay), Some(receipt)) = (again_in, record.receipt_handle.as_deref())
            && let Err(e) = queue.retry_later(receipt, delay).await
        {
            // It comes back after the queue's visibility timeout instead.
            tracing::warn!(message_id = %id, error = %e, "could not set the next attempt's time");
        }
        response.add_failure(id);
    }
    response
}

fn read(record: &SqsMessage) -> Result<Message, String> {
    record
        .body
        .as_deref()
        .ok_or_else(|| "the message has no body".to_owned())
        .and_then(|b| serde_json::from_str::<Message>(b).map_err(|e| e.to_string()))
}
