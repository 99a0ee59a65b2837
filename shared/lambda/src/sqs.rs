//! SQS batches with partial failures: every message is handled on its own, and each one
//! that fails (or cannot be read) is reported, so SQS redelivers it and finally moves it to
//! the dead-letter queue. Nothing is swallowed.

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use pricing_core::model::Message;
use pricing_core::ports::WorkQueue;
use pricing_core::webhooks::Settle;
use tracing::Instrument;

/// The span of one record's work: its message id and the X-Ray trace it continues (the
/// `AWSTraceHeader` its sender attached: the trace of the API request or the function
/// run that queued it), so every log line about the message names both.
fn message_span(record: &SqsMessage) -> tracing::Span {
    let trace = record
        .attributes
        .get("AWSTraceHeader")
        .map(String::as_str)
        .unwrap_or_default();
    tracing::info_span!(
        "message",
        message_id = record.message_id.as_deref().unwrap_or_default(),
        trace
    )
}

/// Handles each record's `Message`; failed and unreadable records are reported by id.
pub async fn handle_batch<F, Fut, E>(event: SqsEvent, handle: F) -> SqsBatchResponse
where
    F: FnMut(Message) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    handle_batch_within(event, None, handle).await
}

/// The least time a record is started with: less is left to the next invocation.
const MIN_TIME_TO_START: Duration = Duration::from_secs(3);

/// [`handle_batch`] within `time` (the invocation's time left, when known): the records
/// are handled one after the other, and none is started once less time is left than
/// twice the longest one took so far (at least [`MIN_TIME_TO_START`]); those are reported
/// failed, untouched, and come back after the queue's visibility timeout. The first is
/// always started. Without it ten large calculations (a few seconds each on DynamoDB)
/// outlasted the function's timeout: the whole batch failed, the ones done too, and
/// every message came back, each receive counting toward the dead-letter queue.
pub async fn handle_batch_within<F, Fut, E>(
    event: SqsEvent,
    time: Option<Duration>,
    mut handle: F,
) -> SqsBatchResponse
where
    F: FnMut(Message) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let started = std::time::Instant::now();
    let mut longest = Duration::ZERO;
    let mut response = SqsBatchResponse::default();
    let mut left_over = 0;
    for (n, record) in event.records.into_iter().enumerate() {
        let id = record.message_id.clone().unwrap_or_default();
        if let Some(time) = time
            && n > 0
            && time.saturating_sub(started.elapsed()) < (2 * longest).max(MIN_TIME_TO_START)
        {
            left_over += 1;
            response.add_failure(id);
            continue;
        }
        let began = std::time::Instant::now();
        let message = read(&record);
        let span = message_span(&record);
        let outcome = match message {
            Ok(message) => handle(message)
                .instrument(span.clone())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("unreadable message: {e}")),
        };
        if let Err(error) = outcome {
            let attempt = record
                .attributes
                .get("ApproximateReceiveCount")
                .cloned()
                .unwrap_or_default();
            span.in_scope(|| {
                tracing::warn!(%attempt, %error, "message failed; SQS will redeliver it");
            });
            response.add_failure(id);
        }
        longest = longest.max(began.elapsed());
    }
    if left_over > 0 {
        tracing::info!(
            left_over,
            longest_ms = longest.as_millis() as u64,
            "the invocation's time is nearly up: messages left for the next one"
        );
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
            let span = message_span(record);
            let outcome = match read(record) {
                Ok(message) => handle(message).instrument(span).await,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log output kept in memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    fn record(id: &str, body: &str, trace: &str) -> serde_json::Value {
        serde_json::json!({
            "messageId": id, "receiptHandle": "r", "body": body,
            "attributes": {"AWSTraceHeader": trace, "ApproximateReceiveCount": "1"},
            "messageAttributes": {}, "eventSource": "aws:sqs", "awsRegion": "us-east-1",
        })
    }

    #[test]
    fn every_line_about_a_message_names_its_message_id_and_trace() {
        let body = serde_json::to_string(&Message::Deliver {
            webhook_id: "wh_1".into(),
        })
        .unwrap();
        let event: SqsEvent = serde_json::from_value(serde_json::json!({"Records": [
            record("m-ok", &body, "Root=1-aaaa-1"),
            record("m-failing", &body, "Root=1-bbbb-2"),
            record("m-unreadable", "{", "Root=1-cccc-3"),
        ]}))
        .unwrap();
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .finish();
        let response = tracing::subscriber::with_default(subscriber, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let mut calls = 0;
            runtime.block_on(handle_batch(event, |_| {
                calls += 1;
                let fail = calls == 2;
                async move {
                    tracing::info!("handling");
                    if fail { Err("boom") } else { Ok(()) }
                }
            }))
        });
        assert_eq!(response.batch_item_failures.len(), 2);
        let out = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let line = |needle: &str| {
            out.lines()
                .filter(|l| l.contains(needle))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        for (id, trace) in [("m-ok", "Root=1-aaaa-1"), ("m-failing", "Root=1-bbbb-2")] {
            let about = line(&format!("message_id=\"{id}\""));
            assert!(!about.is_empty(), "{out}");
            assert!(about.iter().all(|l| l.contains(trace)), "{about:?}");
        }
        assert!(
            line("message failed").iter().all(|l| l.contains("Root=1-")),
            "{out}"
        );
        assert_eq!(line("message failed").len(), 2, "{out}");
    }

    /// Records handled one after the other within the invocation's time: once less is
    /// left than twice the longest record took (at least 3 s), the rest are reported
    /// failed without being started; the first is always started.
    #[test]
    fn records_not_started_in_time_are_reported_failed_untouched() {
        let body = serde_json::to_string(&Message::Deliver {
            webhook_id: "wh_1".into(),
        })
        .unwrap();
        let event = || -> SqsEvent {
            let records: Vec<serde_json::Value> = (0..5)
                .map(|n| record(&format!("m{n}"), &body, "Root=1-aaaa-1"))
                .collect();
            serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let run = |time: Option<Duration>| {
            let started = Arc::new(Mutex::new(0));
            let count = started.clone();
            let response = runtime.block_on(handle_batch_within(event(), time, move |_| {
                *count.lock().unwrap() += 1;
                async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    Ok::<(), String>(())
                }
            }));
            let failed: Vec<String> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            (*started.lock().unwrap(), failed)
        };
        // 4 s: after two records 2.8 s are left, under the 3 s a record is started with.
        assert_eq!(
            run(Some(Duration::from_secs(4))),
            (2, vec!["m2".into(), "m3".into(), "m4".into()])
        );
        // No time left at all: the first is still started (every invocation moves on).
        assert_eq!(run(Some(Duration::ZERO)).0, 1);
        // Time unknown: every record.
        assert_eq!(run(None), (5, vec![]));
    }
}
