//! Deactivation: past its deactivation date an instance is inactive for good. The
//! scheduler turns its flag off and emits `instance.deactivated` once, for every instance
//! whose date passes, active or not (DESIGN.md section 6).

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::ids::InstanceKey;
use crate::model::{Event, Instance, Message};
use crate::ports::{Enqueue, EventStore, InstanceStore, StoreError, StoreResult};
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
/// a date is set and the event was not emitted. Whatever the instance's flag, and however
/// it was written after its date (a user who turns the flag off before the scheduler has
/// seen the date pass still gets the event).
pub fn awaits_deactivation(instance: &Instance) -> bool {
    instance.deactivation_date.is_some() && !deactivation_announced(instance)
}

/// Whether the instance's `instance.deactivated` event was emitted. A record written before
/// this was kept (`deactivation_announced` absent) is read by the rule of then: announced
/// once written inactive at or after its date (deactivation wrote it so; a user's write of
/// the flag off after the date, before the scheduler saw it, read the same and went
/// unannounced).
pub fn deactivation_announced(instance: &Instance) -> bool {
    match (instance.deactivation_announced, instance.deactivation_date) {
        (Some(announced), _) => announced,
        (None, Some(d)) => !instance.active && instance.updated_at >= d,
        (None, None) => false,
    }
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
/// on the next run, and so does a write of the instance between the read and the write
/// here (this one is then not made: the next run reads what the other wrote). `false`
/// when the instance is gone, not past its date, announced already, or written meanwhile.
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
    let read_at = instance.updated_at;
    instance.active = false;
    instance.deactivation_announced = Some(true);
    instance.updated_at = now.at_least_after(read_at);
    match store.put_instance(&instance, read_at).await {
        Ok(()) => {}
        Err(StoreError::Conflict(_) | StoreError::NotFound) => return Ok(false),
        Err(e) => return Err(e),
    }
    queue
        .send(&Message::ProcessInstance { key: key.clone() })
        .await?;
    Ok(true)
}
