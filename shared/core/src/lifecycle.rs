//! Deactivation: past its deactivation date an instance is inactive for good. The
//! scheduler turns its flag off and emits `instance.deactivated` once.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::ids::InstanceKey;
use crate::model::{Event, Instance, Message};
use crate::ports::{Enqueue, EventStore, InstanceStore, StoreResult};
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

/// Deactivates one instance whose flag is on and whose deactivation date has passed (the
/// scheduler finds it due in its index): the event first (idempotent), then the flag
/// (which takes the instance out of the scheduler's index), then a wake-up that dispatches
/// the event. A crash in between repeats the steps on the next run. `false` when the
/// instance is gone, inactive or not past its date (its record is newer than the index).
pub async fn deactivate<S, Q>(
    store: &S,
    queue: &Q,
    key: &InstanceKey,
    now: Timestamp,
) -> StoreResult<bool>
where
    S: EventStore + InstanceStore,
    Q: Enqueue,
{
    let Some(mut instance) = store.get_instance(key).await? else {
        return Ok(false);
    };
    if !(instance.active && instance.is_deactivated(now)) {
        return Ok(false);
    }
    store
        .append_events(key, &[deactivated_event(&instance, now)])
        .await?;
    instance.active = false;
    instance.updated_at = now;
    store.put_instance(&instance).await?;
    queue
        .send(&Message::ProcessInstance { key: key.clone() })
        .await?;
    Ok(true)
}
