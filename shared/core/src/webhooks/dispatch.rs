//! Dispatch: an instance's undispatched events become deliveries for the subscriptions
//! that want them, then are marked dispatched. Deliveries are created idempotently and only
//! the ones this run created are enqueued, so a repeated or concurrent dispatch sends
//! nothing twice; a crash before the mark repeats the run, and a crash between creating a
//! delivery and enqueueing it is repaired by the overdue-delivery sweep.

use crate::ids::InstanceKey;
use crate::model::Message;
use crate::ports::{DeliveryStore, Enqueue, EventStore, StoreResult, SubscriptionStore};
use crate::time::Timestamp;

use super::delivery::Delivery;
use super::subscription::Subscription;

/// Events read per round.
const EVENTS_PER_ROUND: usize = 100;

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
        if !deliveries.is_empty() {
            for webhook_id in store.create_deliveries(&deliveries).await? {
                queue.send(&Message::Deliver { webhook_id }).await?;
                report.deliveries += 1;
            }
        }
        store.mark_dispatched(key, &last.id).await?;
        report.events += events.len();
        if events.len() < EVENTS_PER_ROUND {
            return Ok(report);
        }
    }
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
