//! The webhooks lane: what its consumers (the standalone delivery workers, the
//! webhook-delivery function) do with a message, and the repair sweep that refills it.

use std::time::{Duration, Instant};

use crate::jws::Signer;
use crate::model::Message;
use crate::ports::{
    DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore, StoreError, StoreResult,
    SubscriptionStore, WebhookTransport,
};
use crate::time::Timestamp;

use super::deliver::{Settle, deliver};
use super::trigger::manual_trigger;

/// A delivery this much past due is taken as lost (its message never came) and re-enqueued.
/// Long enough that a backlog of deliveries waiting their turn in the queue is not
/// duplicated every minute (a duplicate is harmless but costs a read); short enough that a
/// lost message delays a webhook by minutes, not hours.
pub const OVERDUE_GRACE: Duration = Duration::from_secs(10 * 60);

/// Handles one message of the webhooks lane.
pub async fn handle<S, Q, T>(
    store: &S,
    queue: &Q,
    transport: &T,
    signer: &Signer,
    message: &Message,
    now: Timestamp,
) -> StoreResult<Settle>
where
    S: DeliveryStore + SubscriptionStore + InstanceStore + PriceStore + EventStore,
    Q: Enqueue,
    T: WebhookTransport,
{
    match message {
        Message::Deliver { webhook_id } => deliver(store, transport, signer, webhook_id, now).await,
        Message::Trigger {
            project,
            subscription_id,
            trigger_id,
            instance_id,
            cursor,
        } => {
            manual_trigger(
                store,
                queue,
                project,
                subscription_id,
                trigger_id,
                instance_id.as_ref(),
                cursor.as_deref(),
                now,
            )
            .await?;
            Ok(Settle::Done)
        }
        Message::ProcessInstance { .. } | Message::Recalculate { .. } => Err(StoreError::Failed(
            format!("{message:?} is instance work, not a webhook"),
        )),
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WebhookSweepReport {
    /// Instances with undispatched events, woken.
    pub instances: usize,
    /// Overdue deliveries re-enqueued.
    pub deliveries: usize,
    /// The deadline came before the sweep was through; the next run goes on.
    pub stopped: bool,
}

/// The repair sweep of the webhook path: wakes the processor of every instance with
/// undispatched events (it dispatches them) and re-enqueues deliveries overdue by more than
/// [`OVERDUE_GRACE`]. A delivery re-enqueued is postponed to `now` first (conditional on
/// its due time being the one read), so that while the queue's backlog exceeds the grace
/// it gets one more message per grace period, not one per run, and concurrent sweeps send
/// one between them. Duplicates are harmless: dispatch and attempts are idempotent.
///
/// At most `limit` instances and `limit` deliveries; [`sweep_until`] also stops at a
/// deadline.
pub async fn sweep<S, Q>(
    store: &S,
    queue: &Q,
    now: Timestamp,
    limit: usize,
) -> StoreResult<WebhookSweepReport>
where
    S: EventStore + DeliveryStore,
    Q: Enqueue,
{
    sweep_until(
        store,
        queue,
        now,
        limit,
        Instant::now() + Duration::from_secs(3_600),
    )
    .await
}

/// [`sweep`] that starts nothing new after `deadline` (the scheduler's budget for it):
/// both lists are read again by the next run, and what this one left is still
/// undispatched or overdue there.
pub async fn sweep_until<S, Q>(
    store: &S,
    queue: &Q,
    now: Timestamp,
    limit: usize,
    deadline: Instant,
) -> StoreResult<WebhookSweepReport>
where
    S: EventStore + DeliveryStore,
    Q: Enqueue,
{
    let mut report = WebhookSweepReport::default();
    let late = |report: &mut WebhookSweepReport| {
        report.stopped = Instant::now() >= deadline;
        report.stopped
    };
    for key in store.instances_with_undispatched_events(limit).await? {
        if late(&mut report) {
            return Ok(report);
        }
        queue.send(&Message::ProcessInstance { key }).await?;
        report.instances += 1;
    }
    let grace = i64::try_from(OVERDUE_GRACE.as_millis()).unwrap_or(i64::MAX);
    let before = Timestamp::from_millis(now.millis() - grace).unwrap_or(now);
    if late(&mut report) {
        return Ok(report);
    }
    for webhook_id in store.overdue_deliveries(before, limit).await? {
        if late(&mut report) {
            return Ok(report);
        }
        // Gone, final or attempted meanwhile (due again later): not lost.
        let Some(delivery) = store.get_delivery(&webhook_id).await? else {
            continue;
        };
        let Some(due) = delivery.next_attempt_at else {
            continue;
        };
        if delivery.status.is_final() || due >= before {
            continue;
        }
        // Due now: not overdue again before now + grace. Of concurrent sweeps, the one
        // that moves the due time sends the message.
        if store.postpone(&webhook_id, due, now).await? {
            queue.send(&Message::Deliver { webhook_id }).await?;
            report.deliveries += 1;
        }
    }
    Ok(report)
}
