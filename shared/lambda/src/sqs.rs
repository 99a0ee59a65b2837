//! SQS batches with partial failures: every message is handled on its own, and each one
//! that fails (or cannot be read) is reported, so SQS redelivers it and finally moves it to
//! the dead-letter queue. Nothing is swallowed.

use std::future::Future;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use pricing_core::model::Message;

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
        let message = record
            .body
            .as_deref()
            .ok_or_else(|| "the message has no body".to_owned())
            .and_then(|b| serde_json::from_str::<Message>(b).map_err(|e| e.to_string()));
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
