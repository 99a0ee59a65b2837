//! A subscription's manual trigger: the latest prices of every instance in its scope are
//! sent again to that subscription alone, with trigger `manual` and the original
//! calculation id and sequence (receivers that keep the newest sequence ignore them), and
//! so is every `entries.rejected` event whose delivery to it failed for good (a lost
//! rejection; the events stay readable at `GET .../instances/{instanceId}/events` too).
//! Idempotent per trigger id: webhook ids derive from it, and a retried message sends
//! what an earlier try stored and never sent (`dispatch::create_and_send`). A
//! project-level trigger fans out into one message per instance, a page of instances per
//! message (the next page is the next message), so a project of any size is resent in
//! bounded steps; an instance's rejections are looked through [`MAX_EVENTS_EXAMINED`]
//! events per message, the next message going on after the last one examined.

use crate::ids::{InstanceId, InstanceKey, ProjectKey, SubscriptionId};
use crate::model::{Event, Message, PageRequest};
use crate::ports::{
    DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore, StoreError, StoreResult,
    SubscriptionStore,
};
use crate::recalc::resent_prices_events;
use crate::time::Timestamp;

use super::delivery::{Delivery, DeliveryStatus, webhook_id};
use super::dispatch::create_and_send;
use super::history::{EventQuery, MAX_EVENTS_EXAMINED, read_events};
use super::subscription::{EventType, Subscription, SubscriptionStatus};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TriggerReport {
    /// Instances whose latest prices were resent.
    pub instances: usize,
    /// Deliveries created (one per `prices.updated` part).
    pub deliveries: usize,
    /// Per-instance trigger messages sent (a project-level trigger's fan-out, and the
    /// continuation of an instance's look through its rejections).
    pub fanned_out: usize,
    /// `entries.rejected` events resent (their delivery to this subscription had failed).
    pub rejections: usize,
    /// Deliveries an earlier try of this trigger stored and did not send (it stopped),
    /// sent now.
    pub resent: usize,
}

/// Instances listed per fan-out message.
pub const TRIGGER_PAGE: usize = 500;

/// Resends the latest prices and the failed rejections of `instance`, or of every instance
/// in the subscription's scope when `instance` is none: an instance-level subscription's
/// own instance directly, a project-level one's instances through one trigger message
/// each, one page of instances (after `cursor`) per call. With an `instance`, `cursor` is
/// where the look through its events goes on (the prices were resent by the first
/// message). A subscription that is gone or disabled, or an instance outside its scope,
/// gets nothing; only the event types the subscription takes are resent.
#[allow(clippy::too_many_arguments)]
pub async fn manual_trigger<S, Q>(
    store: &S,
    queue: &Q,
    project: &ProjectKey,
    subscription: &SubscriptionId,
    trigger_id: &str,
    instance: Option<&InstanceId>,
    cursor: Option<&str>,
    now: Timestamp,
) -> StoreResult<TriggerReport>
where
    S: SubscriptionStore + DeliveryStore + InstanceStore + PriceStore + EventStore,
    Q: Enqueue,
{
    let mut report = TriggerReport::default();
    let Some(sub) = store.get_subscription(project, subscription).await? else {
        return Ok(report);
    };
    if sub.status != SubscriptionStatus::Active {
        return Ok(report);
    }
    let mut keys: Vec<InstanceKey> = Vec::new();
    match (instance, &sub.instance_id) {
        (Some(i), Some(own)) if i != own => return Ok(report),
        (Some(i), _) | (None, Some(i)) => {
            keys.push(project.instance(i.clone()));
        }
        (None, None) => {
            let page = PageRequest {
                cursor: cursor.map(str::to_owned),
                limit: TRIGGER_PAGE,
            };
            let batch = store.list_instances(project, &page).await?;
            for i in &batch.items {
                queue
                    .send(&Message::Trigger {
                        project: project.clone(),
                        subscription_id: subscription.clone(),
                        trigger_id: trigger_id.to_owned(),
                        instance_id: Some(i.instance_id.clone()),
                        cursor: None,
                    })
                    .await?;
                report.fanned_out += 1;
            }
            if let Some(next) = batch.next {
                queue
                    .send(&Message::Trigger {
                        project: project.clone(),
                        subscription_id: subscription.clone(),
                        trigger_id: trigger_id.to_owned(),
                        instance_id: None,
                        cursor: Some(next),
                    })
                    .await?;
            }
            return Ok(report);
        }
    }
    for key in &keys {
        // A continuation message looks through rejections only.
        if cursor.is_none() {
            resend_prices(store, queue, key, &sub, trigger_id, now, &mut report).await?;
        }
        resend_rejections(
            store,
            queue,
            key,
            &sub,
            trigger_id,
            cursor,
            now,
            &mut report,
        )
        .await?;
    }
    Ok(report)
}

async fn resend_prices<S, Q>(
    store: &S,
    queue: &Q,
    key: &InstanceKey,
    sub: &Subscription,
    trigger_id: &str,
    now: Timestamp,
    report: &mut TriggerReport,
) -> StoreResult<()>
where
    S: DeliveryStore + PriceStore,
    Q: Enqueue,
{
    let Some(calculation) = store.latest_prices(key).await? else {
        return Ok(());
    };
    let deliveries: Vec<Delivery> = resent_prices_events(key, &calculation, trigger_id)
        .iter()
        .filter(|e| sub.wants(e))
        .map(|e| Delivery::new(e, sub, now))
        .collect();
    if deliveries.is_empty() {
        return Ok(());
    }
    report.instances += 1;
    let sent = create_and_send(store, queue, &deliveries).await?;
    report.deliveries += sent.created;
    report.resent += sent.resent;
    Ok(())
}

/// The id of `event` resent by trigger `trigger_id` (stable: a retried message creates
/// the same deliveries).
pub fn resent_event_id(trigger_id: &str, event: &Event) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("resent\n{trigger_id}\n{}", event.id));
    let hex: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
    format!("evt_{hex}")
}

/// Resends the `entries.rejected` events of `key` after `after` whose delivery to `sub`
/// ended `failed` (a pending or retrying delivery is still under way; an event without a
/// delivery to it came before the subscription). One page of events per call; the next
/// page is the next message.
#[allow(clippy::too_many_arguments)]
async fn resend_rejections<S, Q>(
    store: &S,
    queue: &Q,
    key: &InstanceKey,
    sub: &Subscription,
    trigger_id: &str,
    after: Option<&str>,
    now: Timestamp,
    report: &mut TriggerReport,
) -> StoreResult<()>
where
    S: DeliveryStore + EventStore,
    Q: Enqueue,
{
    let rejected = EventType::EntriesRejected.as_str();
    if !sub.events.iter().any(|t| t.as_str() == rejected) {
        return Ok(());
    }
    let query = EventQuery {
        types: vec![rejected.to_owned()],
        since: None,
        until: None,
        after: after.map(str::to_owned),
        limit: MAX_EVENTS_EXAMINED,
        max_bytes: usize::MAX,
    };
    let page = match read_events(store, key, &query).await {
        Ok(page) => page,
        // The continuation's event is gone: nothing to go on from.
        Err(StoreError::NotFound) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut deliveries = Vec::new();
    for event in page.items.iter().filter(|e| sub.wants(e)) {
        let original = webhook_id(&event.id, &sub.subscription_id);
        let failed = store
            .get_delivery(&original)
            .await?
            .is_some_and(|d| d.status == DeliveryStatus::Failed);
        if failed {
            let resent = Event {
                id: resent_event_id(trigger_id, event),
                ..event.clone()
            };
            deliveries.push(Delivery::new(&resent, sub, now));
        }
    }
    for chunk in deliveries.chunks(100) {
        let sent = create_and_send(store, queue, chunk).await?;
        report.deliveries += sent.created;
        report.rejections += sent.created;
        report.resent += sent.resent;
    }
    if let Some(next) = page.next {
        queue
            .send(&Message::Trigger {
                project: key.project(),
                subscription_id: sub.subscription_id.clone(),
                trigger_id: trigger_id.to_owned(),
                instance_id: Some(key.instance_id.clone()),
                cursor: Some(next),
            })
            .await?;
        report.fanned_out += 1;
    }
    Ok(())
}
