//! A subscription's manual trigger: the latest prices of every instance in its scope are
//! sent again to that subscription alone, with trigger `manual` and the original
//! calculation id and sequence (receivers that keep the newest sequence ignore them).
//! Idempotent per trigger id: webhook ids derive from it. A project-level trigger fans out
//! into one message per instance, a page of instances per message (the next page is the
//! next message), so a project of any size is resent in bounded steps.

use crate::ids::{InstanceId, InstanceKey, ProjectKey, SubscriptionId};
use crate::model::{Message, PageRequest};
use crate::ports::{
    DeliveryStore, Enqueue, InstanceStore, PriceStore, StoreResult, SubscriptionStore,
};
use crate::recalc::resent_prices_events;
use crate::time::Timestamp;

use super::delivery::Delivery;
use super::subscription::SubscriptionStatus;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TriggerReport {
    /// Instances whose latest prices were resent.
    pub instances: usize,
    /// Deliveries created (one per `prices.updated` part).
    pub deliveries: usize,
    /// Per-instance trigger messages sent (a project-level trigger's fan-out).
    pub fanned_out: usize,
}

/// Instances listed per fan-out message.
pub const TRIGGER_PAGE: usize = 500;

/// Resends the latest prices of `instance`, or of every instance in the subscription's
/// scope when `instance` is none: an instance-level subscription's own instance directly,
/// a project-level one's instances through one trigger message each, one page of
/// instances (after `cursor`) per call. A subscription that is gone or disabled (or does
/// not take `prices.updated`), or an instance outside its scope, gets nothing.
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
    S: SubscriptionStore + DeliveryStore + InstanceStore + PriceStore,
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
        let Some(calculation) = store.latest_prices(key).await? else {
            continue;
        };
        let deliveries: Vec<Delivery> = resent_prices_events(key, &calculation, trigger_id)
            .iter()
            .filter(|e| sub.wants(e))
            .map(|e| Delivery::new(e, &sub, now))
            .collect();
        if deliveries.is_empty() {
            continue;
        }
        report.instances += 1;
        for webhook_id in store.create_deliveries(&deliveries).await? {
            queue.send(&Message::Deliver { webhook_id }).await?;
            report.deliveries += 1;
        }
    }
    Ok(report)
}
