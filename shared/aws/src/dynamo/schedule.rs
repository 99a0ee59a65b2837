//! ActiveInstances and SchedulerCursors: the scheduler's index of active instances.
//!
//! | pk | sk | attributes |
//! |---|---|---|
//! | `I#{pid}/{iid}` | `SCHED` | `record` ({tenant, timeZone, deactivationDate}), `due` N (ms); `gsi1pk` = `ACTIVE#{tenant}`, `gsi1sk` = `{due ms:015}#{pid}/{iid}` |
//! | `SCHEDULER` | `T#{tenant}` | the tenant directory: tenants that have had an active instance |
//! | `SCHEDULER` | `CURSOR#{step}` | `cursor` S: where a scheduler step stopped |
//!
//! The `SCHED` item exists while the instance's flag is set, or while its deactivation
//! date awaits its `instance.deactivated` event (`pricing_core::lifecycle::indexed`; such
//! an item has `inactive` = true): `create_instance` and `put_instance` write it (and the
//! directory entry) in the transaction that writes the instance, with `due` =
//! `pricing_core::lifecycle::index_due` (the instance's `updatedAt`, its deactivation date
//! if earlier or if the instance is inactive); `put_instance` otherwise deletes it. A commit that changes the pricing schedule
//! moves `due` to the commit time afterwards (a hint: if it is lost, the new schedule
//! takes effect at the old one's next slot). The scheduler moves `due` to the next slot
//! with a conditional update. Every read of the index (eventually consistent) is checked
//! by a conditional write or a consistent read before anything is done.

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use pricing_core::ids::{InstanceKey, TenantId};
use pricing_core::model::Instance;
use pricing_core::ports::{
    ActiveInstances, DuePage, InstanceStore, ScheduleEntry, SchedulerCursors, SkippedDue,
    SkippedRecord, StoreError, StoreResult,
};
use pricing_core::state::Header;
use pricing_core::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::keys::{self, GSI1PK, GSI1SK, PK, RECORD, SK};
use super::{DynamoStore, Item, Query, built, decode, get_n, get_s, n, s};
use crate::error::store_error;

/// The index item's sort key in the instance partition (outside the state range
/// `HEAD ..= PROD$` and the transaction markers `T#…`).
pub(crate) const SCHED_SK: &str = "SCHED";
/// Set (true) on the `SCHED` item of an inactive instance awaiting its deactivation event.
const INACTIVE: &str = "inactive";
/// The partition of the tenant directory and the cursors.
const SCHEDULER_PK: &str = "SCHEDULER";
const TENANT_PREFIX: &str = "T#";
const CURSOR_PREFIX: &str = "CURSOR#";
/// The index partition of a tenant's active instances.
fn active_pk(tenant: &TenantId) -> String {
    format!("ACTIVE#{tenant}")
}
/// Instance items indexed by the layout before the `SCHED` items (`gsi1pk = ACTIVE`); the
/// scheduler moves a few onto the new layout at the start of each pass.
const LEGACY_ACTIVE_PK: &str = "ACTIVE";
const LEGACY_PER_PASS: usize = 25;

fn due_sk(due_ms: i64, key: &InstanceKey) -> String {
    format!(
        "{}#{}/{}",
        keys::millis_key(due_ms),
        key.project_id,
        key.instance_id
    )
}

/// The instance fields the index keeps.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexRecord {
    tenant: TenantId,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    deactivation_date: Option<Timestamp>,
    /// Items written before inactive instances were indexed are active instances'.
    #[serde(default = "active_before")]
    active: bool,
}

fn active_before() -> bool {
    true
}

/// When a freshly written instance is due (see [`pricing_core::lifecycle::index_due`]).
fn written_due(instance: &Instance) -> i64 {
    pricing_core::lifecycle::index_due(instance).millis()
}

impl DynamoStore {
    /// The writes that keep the index with an instance written in the same transaction:
    /// the `SCHED` item and the directory entry while it is indexed (active, or awaiting
    /// its deactivation event); with `remove`, a delete of the `SCHED` item otherwise
    /// (`create_instance` has nothing to remove).
    pub(crate) async fn index_writes(
        &self,
        op: &str,
        instance: &Instance,
        remove: bool,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let key = instance.key();
        let pk = keys::instance_pk(&key);
        if !pricing_core::lifecycle::indexed(instance) {
            if !remove {
                return Ok(Vec::new());
            }
            let delete = built(
                op,
                Delete::builder()
                    .table_name(self.table())
                    .key(PK, s(pk))
                    .key(SK, s(SCHED_SK))
                    .build(),
            )?;
            return Ok(vec![TransactWriteItem::builder().delete(delete).build()]);
        }
        let tenant = instance.tenant.clone();
        let record = IndexRecord {
            tenant: tenant.clone(),
            time_zone: instance.time_zone.clone(),
            deactivation_date: instance.deactivation_date,
            active: instance.active,
        };
        let due = written_due(instance);
        let mut put = Put::builder()
            .table_name(self.table())
            .item(PK, s(pk))
            .item(SK, s(SCHED_SK))
            .item(RECORD, s(super::encode(op, &record)?))
            .item("due", n(u64::try_from(due).unwrap_or(0)))
            .item(GSI1PK, s(active_pk(&tenant)))
            .item(GSI1SK, s(due_sk(due, &key)));
        if !instance.active {
            // Indexed for its deactivation event only: a changed schedule does not move it.
            put = put.item(INACTIVE, AttributeValue::Bool(true));
        }
        let entry = built(op, put.build())?;
        let directory = built(
            op,
            Put::builder()
                .table_name(self.table())
                .item(PK, s(SCHEDULER_PK))
                .item(SK, s(format!("{TENANT_PREFIX}{tenant}")))
                .build(),
        )?;
        Ok(vec![
            TransactWriteItem::builder().put(entry).build(),
            TransactWriteItem::builder().put(directory).build(),
        ])
    }

    /// After a commit that changed the pricing schedule: the instance is due at `now` (if
    /// it is indexed and not due earlier). A hint: failures are logged, not returned.
    pub(crate) async fn schedule_changed(&self, key: &InstanceKey, now: Timestamp) {
        let now_ms = now.millis();
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .key(PK, s(keys::instance_pk(key)))
            .key(SK, s(SCHED_SK))
            .update_expression("SET due = :now, gsi1sk = :sk")
            .condition_expression(
                "attribute_exists(gsi1pk) AND attribute_not_exists(inactive) AND due > :now",
            )
            .expression_attribute_values(":now", n(u64::try_from(now_ms).unwrap_or(0)))
            .expression_attribute_values(":sk", s(due_sk(now_ms, key)))
            .send()
            .await;
        match result {
            Ok(_) => {}
            Err(e) if super::is_condition_failed(&e) => {}
            Err(e) => tracing::warn!(
                instance = %key,
                error = %store_error("schedule_changed", e),
                "could not move the due time of a changed schedule; it applies from the next slot"
            ),
        }
    }

    /// Moves up to `limit` instances indexed the old way (`gsi1pk = ACTIVE` on the
    /// instance item) onto `SCHED` items, by writing each instance again.
    async fn migrate_legacy(&self, limit: usize) -> StoreResult<()> {
        const OP: &str = "migrate_legacy_active";
        let mut q = Query::new("gsi1pk = :active")
            .value(":active", s(LEGACY_ACTIVE_PK))
            .max(limit);
        q.index = Some(keys::GSI1);
        for item in self.query(OP, q).await? {
            let Ok(listed) = decode::<Instance>(OP, &item) else {
                continue;
            };
            // A consistent read: the index may be older than the record.
            if let Some(instance) = self.get_instance(&listed.key()).await? {
                // The record as it is; written meanwhile, it was moved by that write.
                match self.put_instance(&instance, instance.updated_at).await {
                    Ok(()) => {}
                    Err(StoreError::Conflict(_) | StoreError::NotFound) => continue,
                    Err(e) => return Err(e),
                }
                tracing::info!(instance = %instance.key(), "moved onto the scheduler's new index");
            }
        }
        Ok(())
    }

    fn entry(
        &self,
        op: &str,
        item: &Item,
        headers: &[Item],
    ) -> StoreResult<Result<ScheduleEntry, SkippedDue>> {
        let pk = get_s(op, item, PK)?;
        let key = keys::parse_instance_pk(pk)
            .ok_or_else(|| StoreError::Failed(format!("{op}: index item {pk}")))?;
        let due_ms = get_n(op, item, "due")?;
        let due = i64::try_from(due_ms)
            .ok()
            .and_then(Timestamp::from_millis)
            .ok_or_else(|| StoreError::Failed(format!("{op}: due time {due_ms} of {key}")))?;
        let skipped = |error: String| SkippedDue {
            record: SkippedRecord {
                key: key.to_string(),
                error,
            },
            key: key.clone(),
            due,
        };
        let record: IndexRecord = match decode(op, item) {
            Ok(r) => r,
            Err(e) => return Ok(Err(skipped(format!("index record: {e}")))),
        };
        let header = headers.iter().find(|h| {
            h.get(PK)
                .and_then(|v| v.as_s().ok())
                .is_some_and(|p| p == pk)
        });
        let schedule = match header.map(|h| decode::<Header>(op, h)) {
            Some(Ok(h)) => h.schedule,
            Some(Err(e)) => return Ok(Err(skipped(format!("state header: {e}")))),
            None => None,
        };
        Ok(Ok(ScheduleEntry {
            key: key.clone(),
            tenant: record.tenant,
            due,
            time_zone: record.time_zone,
            deactivation_date: record.deactivation_date,
            active: record.active,
            schedule,
        }))
    }
}

impl ActiveInstances for DynamoStore {
    /// The directory (`SCHEDULER` / `T#…`), consistent. A pass over the tenants starts with
    /// `after` = none: that call also moves a few instances of the old layout.
    async fn scheduled_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<Vec<TenantId>> {
        const OP: &str = "scheduled_tenants";
        if after.is_none() {
            self.migrate_legacy(LEGACY_PER_PASS).await?;
        }
        let mut q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(SCHEDULER_PK))
            .value(":prefix", s(TENANT_PREFIX))
            .max(limit);
        if let Some(after) = after {
            q = q.after(SCHEDULER_PK.to_owned(), format!("{TENANT_PREFIX}{after}"));
        }
        self.query(OP, q)
            .await?
            .iter()
            .map(|item| {
                let sk = get_s(OP, item, SK)?;
                sk.strip_prefix(TENANT_PREFIX)
                    .and_then(TenantId::from_claim)
                    .ok_or_else(|| StoreError::Failed(format!("{OP}: directory entry {sk}")))
            })
            .collect()
    }

    /// Query `gsi1` `ACTIVE#{tenant}` with `gsi1sk < {now + 1 ms}`, then the headers
    /// (BatchGetItem, consistent) for their schedules.
    async fn due_instances(
        &self,
        tenant: &TenantId,
        now: Timestamp,
        limit: usize,
    ) -> StoreResult<DuePage> {
        const OP: &str = "due_instances";
        let mut q = Query::new("gsi1pk = :pk AND gsi1sk < :before")
            .value(":pk", s(active_pk(tenant)))
            .value(
                ":before",
                s(keys::millis_key(now.millis().saturating_add(1))),
            )
            .max(limit);
        q.index = Some(keys::GSI1);
        let found = self.query(OP, q).await?;
        let heads: Vec<(String, String)> = found
            .iter()
            .filter_map(|item| item.get(PK).and_then(|v| v.as_s().ok()))
            .map(|pk| (pk.clone(), keys::HEAD_SK.to_owned()))
            .collect();
        let headers = if heads.is_empty() {
            Vec::new()
        } else {
            self.batch_get(OP, heads).await?
        };
        let mut page = DuePage::default();
        for item in &found {
            match self.entry(OP, item, &headers)? {
                Ok(e) => page.items.push(e),
                Err(skipped) => page.skipped.push(skipped),
            }
        }
        Ok(page)
    }

    async fn reschedule(
        &self,
        key: &InstanceKey,
        due: Timestamp,
        until: Timestamp,
    ) -> StoreResult<bool> {
        const OP: &str = "reschedule";
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .key(PK, s(keys::instance_pk(key)))
            .key(SK, s(SCHED_SK))
            .update_expression("SET due = :until, gsi1sk = :sk")
            .condition_expression("due = :due")
            .expression_attribute_values(":due", n(u64::try_from(due.millis()).unwrap_or(0)))
            .expression_attribute_values(":until", n(u64::try_from(until.millis()).unwrap_or(0)))
            .expression_attribute_values(":sk", s(due_sk(until.millis(), key)))
            .send()
            .await;
        super::condition_held(OP, result)
    }
}

impl SchedulerCursors for DynamoStore {
    async fn load_cursor(&self, step: &str) -> StoreResult<Option<String>> {
        const OP: &str = "load_cursor";
        self.get(
            OP,
            SCHEDULER_PK.to_owned(),
            &format!("{CURSOR_PREFIX}{step}"),
        )
        .await?
        .map(|item| get_s(OP, &item, "cursor").map(str::to_owned))
        .transpose()
    }

    async fn save_cursor(&self, step: &str, cursor: &str) -> StoreResult<()> {
        const OP: &str = "save_cursor";
        self.client()
            .put_item()
            .table_name(self.table())
            .item(PK, s(SCHEDULER_PK))
            .item(SK, s(format!("{CURSOR_PREFIX}{step}")))
            .item("cursor", s(cursor))
            .send()
            .await
            .map_err(|e| store_error(OP, e))?;
        Ok(())
    }
}
