//! The stack's dead-letter queues, for operators: list, inspect and redrive their messages
//! (docs/operations.md, "Dead-letter queues").
//!
//! A lane is a source queue (process, recalc, webhook) and the dead-letter queue its
//! redrive policy names. Messages are wake-ups and every consumer is idempotent, so a
//! redrive may repeat work but never loses any: a copy is sent to the source queue first,
//! and the dead-letter message is deleted only after that send succeeded.
//!
//! SQS cannot peek. Listing receives the messages with a visibility timeout long enough
//! for one pass, so each is seen once, and makes them visible again at the end.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName,
};

/// What failed, with the SDK error's whole chain.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn sdk<E: std::error::Error + 'static>(what: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| {
        Error(format!(
            "{what}: {}",
            aws_sdk_sqs::error::DisplayErrorContext(e)
        ))
    }
}

/// A source queue and its dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub name: String,
    pub source_url: String,
    pub dead_letter_url: String,
    /// FIFO: a redriven message goes back into its message group.
    pub fifo: bool,
}

impl Lane {
    /// Finds the dead-letter queue of `source_url` from its redrive policy.
    pub async fn resolve(client: &Client, name: &str, source_url: &str) -> Result<Self, Error> {
        let attributes = client
            .get_queue_attributes()
            .queue_url(source_url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(sdk("GetQueueAttributes of the source queue"))?;
        let policy = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .ok_or_else(|| Error(format!("{name}: {source_url} has no redrive policy")))?;
        let policy: serde_json::Value = serde_json::from_str(policy)
            .map_err(|e| Error(format!("{name}: the redrive policy is not JSON: {e}")))?;
        let arn = policy["deadLetterTargetArn"]
            .as_str()
            .ok_or_else(|| Error(format!("{name}: the redrive policy names no queue")))?;
        // arn:aws:sqs:REGION:ACCOUNT:NAME
        let parts: Vec<&str> = arn.split(':').collect();
        let [_, _, "sqs", _, account, queue] = parts[..] else {
            return Err(Error(format!("{name}: not an SQS queue ARN: {arn}")));
        };
        let dead_letter_url = client
            .get_queue_url()
            .queue_name(queue)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(sdk("GetQueueUrl of the dead-letter queue"))?
            .queue_url
            .ok_or_else(|| Error(format!("{name}: no URL for {arn}")))?;
        Ok(Self {
            name: name.to_owned(),
            source_url: source_url.to_owned(),
            fifo: dead_letter_url.ends_with(".fifo"),
            dead_letter_url,
        })
    }

    /// ApproximateNumberOfMessages of the dead-letter queue (visible ones).
    pub async fn approximate_count(&self, client: &Client) -> Result<u64, Error> {
        let out = client
            .get_queue_attributes()
            .queue_url(&self.dead_letter_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(sdk("GetQueueAttributes of the dead-letter queue"))?;
        Ok(out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }
}

/// One message of a dead-letter queue, received (hidden) until released or deleted.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub message_id: String,
    pub body: String,
    /// System attributes: ApproximateReceiveCount, SentTimestamp, MessageGroupId, ...
    pub attributes: HashMap<String, String>,
    pub message_attributes: HashMap<String, MessageAttributeValue>,
    receipt: String,
}

impl DeadLetter {
    pub fn receive_count(&self) -> u64 {
        self.attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// When it was first sent (to the source queue; a FIFO dead-letter queue resets it).
    pub fn sent_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let ms = self.attributes.get("SentTimestamp")?.parse().ok()?;
        chrono::DateTime::from_timestamp_millis(ms)
    }

    pub fn group_id(&self) -> Option<&str> {
        self.attributes.get("MessageGroupId").map(String::as_str)
    }
}

/// How long a pass keeps the messages it received hidden.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);

/// Messages of a lane's dead-letter queue received by one pass, in the order SQS gave them.
struct Pass<'a> {
    client: &'a Client,
    lane: &'a Lane,
    visibility: i32,
    seen: BTreeSet<String>,
}

impl<'a> Pass<'a> {
    fn new(client: &'a Client, lane: &'a Lane, visibility: Duration) -> Self {
        let visibility = i32::try_from(visibility.as_secs().clamp(1, 43_200)).unwrap_or(30);
        Self {
            client,
            lane,
            visibility,
            seen: BTreeSet::new(),
        }
    }

    /// The next batch of messages this pass has not seen; empty when the queue has none
    /// visible (a 1 s long poll, so SQS asks all of its servers).
    async fn next(&mut self, max: usize) -> Result<Vec<DeadLetter>, Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let out = self
            .client
            .receive_message()
            .queue_url(&self.lane.dead_letter_url)
            .max_number_of_messages(i32::try_from(max.min(10)).unwrap_or(10))
            .visibility_timeout(self.visibility)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(sdk("ReceiveMessage from the dead-letter queue"))?;
        let mut batch = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let (Some(message_id), Some(receipt)) = (m.message_id, m.receipt_handle) else {
                continue;
            };
            // A message seen earlier in this pass is back only because its visibility
            // ran out: this pass has dealt with it.
            if !self.seen.insert(message_id.clone()) {
                continue;
            }
            batch.push(DeadLetter {
                message_id,
                body: m.body.unwrap_or_default(),
                attributes: m
                    .attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v))
                    .collect(),
                message_attributes: m.message_attributes.unwrap_or_default(),
                receipt,
            });
        }
        Ok(batch)
    }

    /// Makes `messages` visible again at once.
    async fn release(&self, messages: &[DeadLetter]) -> Result<(), Error> {
        for chunk in messages.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(&m.receipt)
                        .visibility_timeout(0)
                        .build()
                        .map_err(|e| Error(format!("ChangeMessageVisibilityBatch entry: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.client
                .change_message_visibility_batch()
                .queue_url(&self.lane.dead_letter_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sdk("ChangeMessageVisibilityBatch on the dead-letter queue"))?;
        }
        Ok(())
    }
}

/// Up to `max` messages of the lane's dead-letter queue, left in it (visible again when
/// this returns).
pub async fn list(
    client: &Client,
    lane: &Lane,
    max: usize,
    visibility: Duration,
) -> Result<Vec<DeadLetter>, Error> {
    let mut pass = Pass::new(client, lane, visibility);
    let mut out: Vec<DeadLetter> = Vec::new();
    let result = loop {
        match pass.next(max - out.len()).await {
            Ok(batch) if batch.is_empty() => break Ok(()),
            Ok(batch) => out.extend(batch),
            Err(e) => break Err(e),
        }
    };
    pass.release(&out).await?;
    result.map(|()| out)
}

/// What a redrive did.
#[derive(Debug, Default)]
pub struct Redrive {
    /// Sent to the source queue and deleted from the dead-letter queue.
    pub redriven: Vec<String>,
    /// Sent, but the delete failed: the message is still in the dead-letter queue (a
    /// second redrive sends it again, which the consumers take as a duplicate wake-up).
    pub sent_not_deleted: Vec<(String, String)>,
    /// Not sent (left in the dead-letter queue), with the error.
    pub failed: Vec<(String, String)>,
    /// Seen and left alone: not selected, or a dry run.
    pub left: Vec<String>,
}

/// Redrives up to `max` messages of the lane's dead-letter queue, or only those with the
/// given ids: each is sent to the source queue (same body and message attributes; FIFO:
/// same message group, deduplication id `redrive-{message id}`) and deleted from the
/// dead-letter queue after the send succeeded. `dry_run` sends and deletes nothing.
pub async fn redrive(
    client: &Client,
    lane: &Lane,
    only: Option<&BTreeSet<String>>,
    max: usize,
    visibility: Duration,
    dry_run: bool,
) -> Result<Redrive, Error> {
    let mut pass = Pass::new(client, lane, visibility);
    let mut report = Redrive::default();
    let mut held = Vec::new();
    let mut seen = 0;
    let result = loop {
        let batch = match pass.next(max - seen).await {
            Ok(batch) if batch.is_empty() => break Ok(()),
            Ok(batch) => batch,
            Err(e) => break Err(e),
        };
        seen += batch.len();
        for message in batch {
            let selected = only.is_none_or(|ids| ids.contains(&message.message_id));
            if !selected || dry_run {
                report.left.push(message.message_id.clone());
                held.push(message);
                continue;
            }
            if let Err(e) = send_back(client, lane, &message).await {
                report
                    .failed
                    .push((message.message_id.clone(), e.to_string()));
                held.push(message);
                continue;
            }
            match client
                .delete_message()
                .queue_url(&lane.dead_letter_url)
                .receipt_handle(&message.receipt)
                .send()
                .await
            {
                Ok(_) => report.redriven.push(message.message_id),
                Err(e) => report.sent_not_deleted.push((
                    message.message_id,
                    sdk("DeleteMessage from the dead-letter queue")(e).0,
                )),
            }
        }
        let handled = report.redriven.len() + report.sent_not_deleted.len() + report.failed.len();
        if only.is_some_and(|ids| ids.len() == handled) {
            break Ok(());
        }
    };
    pass.release(&held).await?;
    result.map(|()| report)
}

async fn send_back(client: &Client, lane: &Lane, message: &DeadLetter) -> Result<(), Error> {
    let mut send = client
        .send_message()
        .queue_url(&lane.source_url)
        .message_body(&message.body);
    if !message.message_attributes.is_empty() {
        send = send.set_message_attributes(Some(message.message_attributes.clone()));
    }
    if lane.source_url.ends_with(".fifo") {
        let group = message
            .group_id()
            .ok_or_else(|| Error("a FIFO message without a MessageGroupId".to_owned()))?;
        send = send
            .message_group_id(group)
            .message_deduplication_id(format!("redrive-{}", message.message_id));
    }
    send.send()
        .await
        .map_err(sdk("SendMessage to the source queue"))?;
    Ok(())
}
