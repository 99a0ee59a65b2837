//! WorkQueue on SQS. The body of each message is the JSON of `Message`.
//!
//! FIFO queues (URL ending in `.fifo`): the message group is `Message::group()`, and each
//! send has a fresh deduplication id. Content-based or key-based deduplication would be
//! wrong here: SQS drops a message whose deduplication id it saw in the last 5 minutes even
//! when the first one was already received, so a wake-up sent while an earlier one is being
//! handled would be lost. Extra wake-ups cost one cheap run of the processor.
//!
//! Receiving from a FIFO queue asks for one message per call: SQS may hand out several
//! messages of one group in a single batch, and the port promises at most one in flight
//! per group. Standard queues have no groups; their batches take up to 10 messages.
//!
//! A body that is not a `Message` is logged and left alone: it becomes visible again after
//! the visibility timeout and finally moves to the dead-letter queue (redrive policy).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    MessageSystemAttributeName, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};
use pricing_core::model::{Lane, Message};
use pricing_core::ports::{Received, StoreResult, WorkQueue};

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::error::{code, store_error};

/// Messages per ReceiveMessage call (the API's limit).
const RECEIVE_BATCH: usize = 10;
/// The longest visibility timeout SQS accepts (12 h).
const MAX_VISIBILITY_SECS: u64 = 43_200;
/// Errors that mean "this receipt no longer refers to a message in flight": `ack` and
/// `retry_later` of such a receipt are no-ops, as the port says.
const STALE_RECEIPT_CODES: &[&str] = &[
    "ReceiptHandleIsInvalid",
    "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
];

/// Decodes the body of a work message (for Lambda handlers that receive SQS events).
pub fn parse_message(body: &str) -> Result<Message, serde_json::Error> {
    serde_json::from_str(body)
}

/// A WorkQueue on one SQS queue. Cheap to clone.
#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    url: Arc<str>,
    fifo: bool,
}

impl std::fmt::Debug for SqsQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsQueue")
            .field("url", &self.url)
            .field("fifo", &self.fifo)
            .finish_non_exhaustive()
    }
}

impl SqsQueue {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        let url: String = url.into();
        SqsQueue {
            client,
            fifo: url.ends_with(".fifo"),
            url: Arc::from(url),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn is_fifo(&self) -> bool {
        self.fifo
    }
}

/// Whether an ack or retry_later failed only because the receipt is stale (the message
/// was deleted, or is no longer in flight). SQS reports an expired receipt of
/// ChangeMessageVisibility as an InvalidParameterValue about the ReceiptHandle.
fn is_stale_receipt<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    match code(e) {
        Some(c) if STALE_RECEIPT_CODES.contains(&c) => true,
        Some("InvalidParameterValue") => e
            .as_service_error()
            .and_then(|s| s.message())
            .is_some_and(|m| m.contains("ReceiptHandle")),
        _ => false,
    }
}

/// The X-Ray trace header of the work under way (`_X_AMZN_TRACE_ID`, which the Lambda
/// runtime sets for each invocation): a message sent carries it as its `AWSTraceHeader`,
/// so the function that handles the message continues the trace and logs the same trace
/// id (docs/operations.md, "Tracing"). None outside Lambda.
pub fn trace_header() -> Option<String> {
    std::env::var("_X_AMZN_TRACE_ID")
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= 1024)
}

/// Whole seconds, rounded up, within what SQS accepts.
fn whole_seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.min(MAX_VISIBILITY_SECS)).unwrap_or(i32::MAX)
}

/// The JSON body of `message`.
fn encode(message: &Message) -> StoreResult<String> {
    serde_json::to_string(message).map_err(|e| {
        pricing_core::ports::StoreError::Failed(format!("send: encoding the message: {e}"))
    })
}

/// The `AWSTraceHeader` attribute carrying the trace header `trace`.
fn trace_attribute(trace: &str) -> StoreResult<MessageSystemAttributeValue> {
    MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(trace)
        .build()
        .map_err(|e| pricing_core::ports::StoreError::Failed(format!("send: trace header: {e}")))
}

/// Messages per SendMessageBatch call (the API's limit).
const SEND_BATCH: usize = 10;
/// Bytes of message bodies per SendMessageBatch call: the API takes 256 KiB a batch,
/// attributes included.
const SEND_BATCH_BYTES: usize = 192 * 1024;
/// SendMessageBatch calls of one [`SqsQueue::send_all_traced`] in flight at once.
const SEND_CONCURRENCY: usize = 8;

/// `bodies` cut into consecutive batches of at most [`SEND_BATCH`] messages and
/// [`SEND_BATCH_BYTES`] bytes (a body larger than that alone in its batch: SQS judges it).
fn batches(bodies: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        if i > start && (i - start == SEND_BATCH || bytes + body.len() > SEND_BATCH_BYTES) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(start..bodies.len());
    }
    out
}

impl SqsQueue {
    /// Sends `message` with the X-Ray trace header `trace` as its `AWSTraceHeader` (none:
    /// no trace). [`WorkQueue::send`] passes the invocation's own ([`trace_header`]).
    pub async fn send_traced(&self, message: &Message, trace: Option<&str>) -> StoreResult<()> {
        let mut req = self
            .client
            .send_message()
            .queue_url(&*self.url)
            .message_body(encode(message)?);
        if self.fifo {
            req = req
                .message_group_id(message.group())
                .message_deduplication_id(ulid::Ulid::new().to_string());
        }
        if let Some(trace) = trace {
            req = req.message_system_attributes(
                MessageSystemAttributeNameForSends::AwsTraceHeader,
                trace_attribute(trace)?,
            );
        }
        req.send().await.map_err(|e| store_error("send", e))?;
        Ok(())
    }

    /// Sends every one of `messages` as [`SqsQueue::send_traced`] would, in SendMessageBatch
    /// calls of up to ten, several at once: a thousand calculations are a hundred calls,
    /// not a thousand one after the other. A message a batch refuses for a reason on SQS's
    /// side is sent again alone; one refused as the sender's fault is an error.
    pub async fn send_all_traced(
        &self,
        messages: &[&Message],
        trace: Option<&str>,
    ) -> StoreResult<()> {
        use futures_util::StreamExt;
        let bodies = messages
            .iter()
            .map(|m| encode(m))
            .collect::<StoreResult<Vec<String>>>()?;
        let sent: Vec<StoreResult<()>> = futures_util::stream::iter(batches(&bodies))
            .map(|range| self.send_batch(messages, &bodies, range, trace))
            .buffer_unordered(SEND_CONCURRENCY)
            .collect()
            .await;
        sent.into_iter().collect()
    }

    /// One SendMessageBatch of `messages[range]`, whose bodies are `bodies[range]`.
    async fn send_batch(
        &self,
        messages: &[&Message],
        bodies: &[String],
        range: std::ops::Range<usize>,
        trace: Option<&str>,
    ) -> StoreResult<()> {
        let mut req = self.client.send_message_batch().queue_url(&*self.url);
        for i in range {
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&bodies[i]);
            if self.fifo {
                entry = entry
                    .message_group_id(messages[i].group())
                    .message_deduplication_id(ulid::Ulid::new().to_string());
            }
            if let Some(trace) = trace {
                entry = entry.message_system_attributes(
                    MessageSystemAttributeNameForSends::AwsTraceHeader,
                    trace_attribute(trace)?,
                );
            }
            req = req.entries(entry.build().map_err(|e| {
                pricing_core::ports::StoreError::Failed(format!("send (batch): {e}"))
            })?);
        }
        let out = req
            .send()
            .await
            .map_err(|e| store_error("send (batch)", e))?;
        for failed in out.failed() {
            let refused = || {
                format!(
                    "send (batch): message {} refused: {} {}",
                    failed.id(),
                    failed.code(),
                    failed.message().unwrap_or_default()
                )
            };
            let message = failed
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| messages.get(i))
                .ok_or_else(|| pricing_core::ports::StoreError::Failed(refused()))?;
            if failed.sender_fault() {
                return Err(pricing_core::ports::StoreError::Failed(refused()));
            }
            tracing::warn!(
                code = failed.code(),
                "a batch refused a message; sent alone"
            );
            self.send_traced(message, trace).await?;
        }
        Ok(())
    }
}

impl WorkQueue for SqsQueue {
    async fn send(&self, message: &Message) -> StoreResult<()> {
        self.send_traced(message, trace_header().as_deref()).await
    }

    async fn receive(&self, max: usize, visibility: Duration) -> StoreResult<Vec<Received>> {
        let per_call = if self.fifo { 1 } else { RECEIVE_BATCH };
        let mut out = Vec::new();
        while out.len() < max {
            let ask = per_call.min(max - out.len());
            let result = self
                .client
                .receive_message()
                .queue_url(&*self.url)
                .max_number_of_messages(i32::try_from(ask).unwrap_or(1))
                .visibility_timeout(whole_seconds(visibility))
                .wait_time_seconds(0)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send()
                .await
                .map_err(|e| store_error("receive", e))?;
            let messages = result.messages.unwrap_or_default();
            let got = messages.len();
            for m in messages {
                let Some(receipt) = m.receipt_handle else {
                    continue;
                };
                let body = m.body.unwrap_or_default();
                let message = match parse_message(&body) {
                    Ok(message) => message,
                    Err(e) => {
                        tracing::error!(
                            message_id = m.message_id.as_deref().unwrap_or("?"),
                            error = %e,
                            "queue message is not a Message; left for the dead-letter queue"
                        );
                        continue;
                    }
                };
                let receive_count = m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                out.push(Received {
                    receipt,
                    message,
                    receive_count,
                });
            }
            if got < ask {
                break;
            }
        }
        Ok(out)
    }

    async fn ack(&self, receipt: &str) -> StoreResult<()> {
        match self
            .client
            .delete_message()
            .queue_url(&*self.url)
            .receipt_handle(receipt)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_stale_receipt(&e) => Ok(()),
            Err(e) => Err(store_error("ack", e)),
        }
    }

    async fn retry_later(&self, receipt: &str, delay: Duration) -> StoreResult<()> {
        match self
            .client
            .change_message_visibility()
            .queue_url(&*self.url)
            .receipt_handle(receipt)
            .visibility_timeout(whole_seconds(delay))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_stale_receipt(&e) => Ok(()),
            Err(e) => Err(store_error("retry_later", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_cut_into_batches_of_ten_messages_and_at_most_192_kib() {
        let small = |n: usize| vec!["x".repeat(100); n];
        assert_eq!(batches(&[]), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(batches(&small(1)), vec![0..1]);
        assert_eq!(batches(&small(10)), vec![0..10]);
        assert_eq!(batches(&small(23)), vec![0..10, 10..20, 20..23]);
        // 8 KiB of metadata each (the most a calculation carries): ten still fit.
        assert_eq!(
            batches(&vec!["m".repeat(8 * 1024 + 200); 11]),
            vec![0..10, 10..11]
        );
        // Large bodies: as many as fit, and one over the limit alone.
        let big = vec!["b".repeat(70 * 1024); 4];
        assert_eq!(batches(&big), vec![0..2, 2..4]);
        let huge = vec!["h".repeat(300 * 1024), "s".to_owned(), "t".to_owned()];
        assert_eq!(batches(&huge), vec![0..1, 1..3]);
    }

    #[test]
    fn visibility_is_rounded_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(99_999)), 43_200);
    }

    #[test]
    fn messages_parse_from_their_json() {
        let m = parse_message(
            r#"{"kind":"processInstance","key":{"tenant":"t","projectId":"p","instanceId":"i"}}"#,
        )
        .expect("a message");
        assert_eq!(m.group(), "t/p/i");
        assert!(parse_message("{}").is_err());
        assert!(parse_message("nope").is_err());
    }
}

/// Producers' view of the stack's queues: each message goes to the queue of its lane
/// (`Message::lane()`): processing wake-ups to the FIFO process queue, calculations to the
/// recalc queue, deliveries and manual triggers to the webhook queue.
#[derive(Clone, Debug)]
pub struct Queues {
    pub process: SqsQueue,
    pub recalc: SqsQueue,
    pub webhooks: SqsQueue,
}

impl Queues {
    /// The stack's queues from its configuration, sharing one SQS client.
    pub fn new(client: &Client, config: &crate::Config) -> Self {
        Queues {
            process: SqsQueue::new(client.clone(), &config.process_queue_url),
            recalc: SqsQueue::new(client.clone(), &config.recalc_queue_url),
            webhooks: SqsQueue::new(client.clone(), &config.webhook_queue_url),
        }
    }

    /// The queue of a lane.
    pub fn lane(&self, lane: Lane) -> &SqsQueue {
        match lane {
            Lane::Process => &self.process,
            Lane::Recalc => &self.recalc,
            Lane::Webhooks => &self.webhooks,
        }
    }
}

impl pricing_core::ports::Enqueue for Queues {
    async fn send(&self, message: &Message) -> StoreResult<()> {
        WorkQueue::send(self.lane(message.lane()), message).await
    }

    /// Each lane's messages in batches ([`SqsQueue::send_all_traced`]), the lanes at once.
    async fn send_all(&self, messages: &[Message]) -> StoreResult<()> {
        let trace = trace_header();
        let of = |lane: Lane| -> Vec<&Message> {
            messages.iter().filter(|m| m.lane() == lane).collect()
        };
        let (process, recalc, webhooks) = (of(Lane::Process), of(Lane::Recalc), of(Lane::Webhooks));
        let (a, b, c) = tokio::join!(
            self.process.send_all_traced(&process, trace.as_deref()),
            self.recalc.send_all_traced(&recalc, trace.as_deref()),
            self.webhooks.send_all_traced(&webhooks, trace.as_deref()),
        );
        a.and(b).and(c)
    }
}
