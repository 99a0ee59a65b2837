//! Deactivation: past its deactivation date an instance is inactive for good. The
//! scheduler turns its flag off and emits `instance.deactivated` once.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::ids::InstanceKey;
use crate::model::{Event, Instance, Message, PageRequest};
use crate::ports::{
    ActiveInstances, Enqueue, EventStore, InstanceStore, SkippedRecord, StoreResult,
};
use crate::time::Timestamp;

/// The `instance.deactivated` event of an instance; one id per instance, so emitting it
/// again is a no-op.
pub fn deactivated_event(instance: &Instance, now: Timestamp) -> Event {
    let key = instance.key();
    let digest = Sha256::digest(format!("instance.deactivated\n{key}"));
    let id: String = digest[..13].iter().map(|b| format!("{b:02x}")).collect();
    Event {
        id: format!("evt_{id}"),
        event_type: "instance.deactivated".into(),
        project_id: key.project_id,
        instance_id: key.instance_id,
        created_at: now,
        data: json!({
            "deactivationDate": instance.deactivation_date,
            "deactivatedAt": now,
        }),
    }
}

/// Deactivates every instance whose flag is on and whose deactivation date has passed:
/// the event first (idempotent), then the flag, then a wake-up that dispatches the event.
/// A crash in between repeats the steps on the next run.
pub async fn deactivate_due<S, Q>(
    store: &S,
    queue: &Q,
    now: Timestamp,
) -> StoreResult<Deactivations>
where
    S: ActiveInstances + EventStore + InstanceStore,
    Q: Enqueue,
{
    let mut due: Vec<Instance> = Vec::new();
    let mut skipped = Vec::new();
    let mut page = PageRequest {
        cursor: None,
        limit: 500,
    };
    loop {
        let batch = store.active_instances(&page).await?;
        skipped.extend(batch.skipped);
        due.extend(
            batch
                .items
                .into_iter()
                .map(|s| s.instance)
                .filter(|i| i.active && i.is_deactivated(now)),
        );
        match batch.next {
            Some(next) => page.cursor = Some(next),
            None => break,
        }
    }
    let mut done = Vec::with_capacity(due.len());
    for listed in due {
        let key = listed.key();
        // Re-read: the listing may be older than a concurrent PUT of the instance.
        let Some(mut instance) = store.get_instance(&key).await? else {
            continue;
        };
        if !(instance.active && instance.is_deactivated(now)) {
            continue;
        }
        store
            .append_events(&key, &[deactivated_event(&instance, now)])
            .await?;
        instance.active = false;
        instance.updated_at = now;
        store.put_instance(&instance).await?;
        queue
            .send(&Message::ProcessInstance { key: key.clone() })
            .await?;
        done.push(key);
    }
    Ok(Deactivations { done, skipped })
}

/// What [`deactivate_due`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deactivations {
    /// The instances deactivated.
    pub done: Vec<InstanceKey>,
    /// Active instances whose records could not be decoded: skipped, for the caller to report.
    pub skipped: Vec<SkippedRecord>,
}
