//! Dispatch: an instance's undispatched events become deliveries for the subscriptions
//! that want them, then are marked dispatched. Deliveries are created idempotently (a
//! webhook id derives from the event and the subscription). The ones this run created are
//! enqueued, and so are the ones an earlier run created that still wait for their first
//! attempt: a crash before the mark repeats the run, and a create whose answer was lost
//! (it was applied, the retry finds the deliveries there) would otherwise leave them to the
//! overdue-delivery sweep, a grace period late ([`create_and_send`], which a manual
//! trigger's resend uses too). That costs at most a duplicate message,
//! which an attempt finds done or sends under the same webhook id. A crash between
//! creating a delivery and enqueueing it after the mark is repaired by the sweep.

use crate::ids::InstanceKey;
use crate::model::Message;
use crate::ports::{DeliveryStore, Enqueue, EventStore, StoreResult, SubscriptionStore};
use crate::time::Timestamp;

use super::delivery::{Delivery, DeliveryStatus};
use super::subscription::Subscription;

/// Events read per round. A large instance's calculation stores one `prices.updated` part
/// per 1,000 prices (about 0.6 MB each once read, and every delivery made from it holds a
/// copy), so a round of 100 held ~130 MB for a 100,000-item instance with one
/// subscription; 10 keep a round to a few MB. Each round costs one mark (a write).
const EVENTS_PER_ROUND: usize = 10;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    pub events: usize,
    pub deliveries: usize,
}

/// Dispatches every undispatched event of `key`.
pub async fn dispatch<S, Q>(
    store: &S,
    queue: &Q,
    key: &InstanceKey,
    now: Timestamp,
) -> StoreResult<DispatchReport>
where
    S: EventStore + SubscriptionStore + DeliveryStore,
    Q: Enqueue,
{
    let mut report = DispatchReport::default();
    let mut subscriptions: Option<Vec<Subscription>> = None;
    loop {
        let events = store.undispatched_events(key, EVENTS_PER_ROUND).await?;
        let Some(last) = events.last() else {
            return Ok(report);
        };
        let subs = match &subscriptions {
            Some(s) => s,
            None => subscriptions.insert(subscriptions_of(store, key).await?),
        };
        let deliveries: Vec<Delivery> = events
            .iter()
            .flat_map(|e| {
                subs.iter()
                    .filter(|s| s.wants(e))
                    .map(|s| Delivery::new(e, s, now))
            })
            .collect();
        report.deliveries += create_and_send(store, queue, &deliveries).await?.created;
        store.mark_dispatched(key, &last.id).await?;
        report.events += events.len();
        if events.len() < EVENTS_PER_ROUND {
            return Ok(report);
        }
    }
}

/// What [`create_and_send`] did with a list of deliveries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sent {
    /// Created now, and sent.
    pub created: usize,
    /// Created by an earlier run that did not send them (it stopped, or the answer to its
    /// create was lost), and still waiting for their first attempt: sent now.
    pub resent: usize,
}

/// Creates `deliveries` and enqueues the ones created and, of the others, those an earlier
/// run created that still wait for their first attempt. Dispatch and a manual trigger's
/// resend both go through it, so a retried message never leaves what its first try stored
/// to the overdue-delivery sweep.
pub(super) async fn create_and_send<S, Q>(
    store: &S,
    queue: &Q,
    deliveries: &[Delivery],
) -> StoreResult<Sent>
where
    S: DeliveryStore,
    Q: Enqueue,
{
    let mut sent = Sent::default();
    if deliveries.is_empty() {
        return Ok(sent);
    }
    let created = store.create_deliveries(deliveries).await?;
    if created.len() < deliveries.len() {
        for webhook_id in unsent(store, deliveries, &created).await? {
            queue.send(&Message::Deliver { webhook_id }).await?;
            sent.resent += 1;
        }
    }
    for webhook_id in created {
        queue.send(&Message::Deliver { webhook_id }).await?;
        sent.created += 1;
    }
    Ok(sent)
}

/// Of `deliveries`, those not in `created` that are stored and still wait for their first
/// attempt. Sending them again costs at most a duplicate message (an attempt finds a sent
/// delivery done; two concurrent attempts send under the same webhook id), where waiting
/// for the overdue-delivery sweep would hold them back for its grace period.
async fn unsent<S: DeliveryStore>(
    store: &S,
    deliveries: &[Delivery],
    created: &[String],
) -> StoreResult<Vec<String>> {
    let mut unsent = Vec::new();
    for d in deliveries
        .iter()
        .filter(|d| !created.contains(&d.webhook_id))
    {
        if let Some(stored) = store.get_delivery(&d.webhook_id).await?
            && stored.status == DeliveryStatus::Pending
            && stored.attempt == 0
        {
            unsent.push(stored.webhook_id);
        }
    }
    Ok(unsent)
}

/// The project-level subscriptions and the instance's own.
async fn subscriptions_of<S: SubscriptionStore>(
    store: &S,
    key: &InstanceKey,
) -> StoreResult<Vec<Subscription>> {
    let project = key.project();
    let mut subs = store.list_subscriptions(&project, None).await?;
    subs.extend(
        store
            .list_subscriptions(&project, Some(&key.instance_id))
            .await?,
    );
    Ok(subs)
}
