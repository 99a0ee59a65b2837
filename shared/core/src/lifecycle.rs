//! Deactivation: past its deactivation date an instance is inactive for good. The
//! scheduler turns its flag off and emits `instance.deactivated` once, for every instance
//! whose date passes, active or not (DESIGN.md section 6).

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

/// Whether the instance's deactivation date still awaits its `instance.deactivated` event:
/// a date is set and the instance was not written since it (deactivation writes the
/// instance at or after the date, which ends the wait). An active instance always waits.
pub fn awaits_deactivation(instance: &Instance) -> bool {
    instance
        .deactivation_date
        .is_some_and(|d| instance.active || instance.updated_at < d)
}

/// Whether the scheduler's index holds the instance: active, or awaiting its
/// deactivation event (see [`crate::ports::ActiveInstances`]).
pub fn indexed(instance: &Instance) -> bool {
    instance.active || awaits_deactivation(instance)
}

/// When a freshly written, indexed instance is due: an active one at once (its
/// `updated_at`) or at its deactivation date if that is earlier; an inactive one at its
/// deactivation date.
pub fn index_due(instance: &Instance) -> Timestamp {
    match (instance.active, instance.deactivation_date) {
        (true, Some(d)) => d.min(instance.updated_at),
        (false, Some(d)) => d,
        (_, None) => instance.updated_at,
    }
}

/// Deactivates one instance whose deactivation date has passed, active or not (the
/// scheduler finds it due in its index): the event first (idempotent), then the flag off
/// and the record written at `now` (which takes the instance out of the scheduler's
/// index), then a wake-up that dispatches the event. A crash in between repeats the steps
/// on the next run. `false` when the instance is gone, not past its date, or announced
/// already (its record is newer than the index).
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
    if !(instance.is_deactivated(now) && awaits_deactivation(&instance)) {
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
