//! ActiveInstances and SchedulerCursors: the scheduler's index, one row per active
//! instance (and per inactive one awaiting its deactivation event) in `schedule_index`,
//! ordered by (tenant, due time).
//!
//! Triggers keep the index with the instance rows (schema v5, [`SCHEMA_V5`]; v7,
//! [`SCHEMA_V7`]; v11, [`SCHEMA_V11`]): an instance written with its flag set has a row (tenant from its
//! project, due at its `updatedAt` or its deactivation date if earlier, its time zone,
//! deactivation date and flag); one written without has a row only while its deactivation
//! date awaits its event (due at that date: not announced, whenever the record was
//! written); a state header whose schedule changes moves
//! the due time to the commit time. So the index changes in the same transaction as what
//! it mirrors.

use pricing_core::entry::Schedule;
use pricing_core::ids::{InstanceKey, TenantId};
use pricing_core::ports::{
    ActiveInstances, DuePage, ScheduleEntry, SchedulerCursors, SkippedDue, SkippedRecord,
    StoreError, StoreResult,
};
use pricing_core::state::Header;
use pricing_core::time::Timestamp;
use rusqlite::{OptionalExtension, params};
use serde::Deserialize;

use crate::EmbeddedStore;
use crate::db::{DbError, stored_instance_key, text};

/// Version 5: the scheduler's index and cursors.
///
/// - `schedule_index`: one row per active instance, kept by triggers on `instances`
///   (insert, update) and `state_headers` (a changed schedule); `record` holds the
///   instance's time zone and deactivation date. Instances active before this version
///   are indexed as due at once.
/// - `scheduler_cursors`: where each scheduler step stopped.
pub(crate) const SCHEMA_V5: &str = r#"
CREATE TABLE schedule_index (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    due_ms      INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id)
) WITHOUT ROWID;
CREATE INDEX schedule_due ON schedule_index (tenant, due_ms, project_id, instance_id);

CREATE TABLE scheduler_cursors (
    step   TEXT NOT NULL PRIMARY KEY,
    cursor TEXT NOT NULL
) WITHOUT ROWID;

INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
SELECT i.project_id, i.instance_id, COALESCE(p.tenant, '?'), 0,
       json_object('timeZone', json_extract(i.record, '$.timeZone'),
                   'deactivationDate', json_extract(i.record, '$.deactivationDate'))
FROM instances i LEFT JOIN projects p ON p.project_id = i.project_id
WHERE json_extract(i.record, '$.active') = 1;

CREATE TRIGGER instances_index_insert AFTER INSERT ON instances
WHEN json_extract(new.record, '$.active') = 1
BEGIN
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    VALUES (
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt'))
                                 - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate'))
                                 - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807)
        ),
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'))
    )
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;

CREATE TRIGGER instances_index_update AFTER UPDATE OF record ON instances
BEGIN
    DELETE FROM schedule_index
    WHERE project_id = new.project_id AND instance_id = new.instance_id
      AND json_extract(new.record, '$.active') IS NOT 1;
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    SELECT
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt'))
                                 - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate'))
                                 - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807)
        ),
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'))
    WHERE json_extract(new.record, '$.active') = 1
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;

CREATE TRIGGER headers_schedule_changed AFTER UPDATE OF record ON state_headers
WHEN json_extract(old.record, '$.schedule') IS NOT json_extract(new.record, '$.schedule')
BEGIN
    UPDATE schedule_index
    SET due_ms = MIN(due_ms, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
    WHERE project_id = new.project_id AND instance_id = new.instance_id;
END;
"#;

/// Version 7: the index also holds every inactive instance whose deactivation date awaits
/// its `instance.deactivated` event ([`pricing_core::lifecycle::indexed`]: a date is set
/// and the instance was not written since it), due at that date; rows record the flag
/// (`active`; rows written before this version are active ones), and a changed pricing
/// schedule moves only active rows. Inactive instances that await their event are indexed
/// at once (one whose date passed gets it at the next run).
pub(crate) const SCHEMA_V7: &str = r#"
DROP TRIGGER instances_index_insert;
DROP TRIGGER instances_index_update;
DROP TRIGGER headers_schedule_changed;

CREATE TRIGGER headers_schedule_changed AFTER UPDATE OF record ON state_headers
WHEN json_extract(old.record, '$.schedule') IS NOT json_extract(new.record, '$.schedule')
BEGIN
    UPDATE schedule_index
    SET due_ms = MIN(due_ms, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))
    WHERE project_id = new.project_id AND instance_id = new.instance_id
      AND json_extract(record, '$.active') IS NOT 0;
END;

INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
SELECT i.project_id, i.instance_id, COALESCE(p.tenant, '?'),
       CAST(ROUND((julianday(json_extract(i.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER),
       json_object('timeZone', json_extract(i.record, '$.timeZone'),
                   'deactivationDate', json_extract(i.record, '$.deactivationDate'),
                   'active', json('false'))
FROM instances i LEFT JOIN projects p ON p.project_id = i.project_id
WHERE json_extract(i.record, '$.active') IS NOT 1
  AND json_extract(i.record, '$.deactivationDate') IS NOT NULL
  AND CAST(ROUND((julianday(json_extract(i.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(i.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER)
ON CONFLICT (project_id, instance_id) DO NOTHING;

CREATE TRIGGER instances_index_insert AFTER INSERT ON instances
WHEN (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER)))
BEGIN
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    VALUES (
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        CASE WHEN json_extract(new.record, '$.active') = 1 THEN MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807))
        ELSE CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END,
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'),
                    'active', json(CASE WHEN json_extract(new.record, '$.active') = 1
                                   THEN 'true' ELSE 'false' END))
    )
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;

CREATE TRIGGER instances_index_update AFTER UPDATE OF record ON instances
BEGIN
    DELETE FROM schedule_index
    WHERE project_id = new.project_id AND instance_id = new.instance_id
      AND NOT (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER)));
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    SELECT
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        CASE WHEN json_extract(new.record, '$.active') = 1 THEN MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807))
        ELSE CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END,
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'),
                    'active', json(CASE WHEN json_extract(new.record, '$.active') = 1
                                   THEN 'true' ELSE 'false' END))
    WHERE (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER)))
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;
"#;

/// Version 11: an instance's record says whether its `instance.deactivated` event was
/// emitted (`deactivationAnnounced`, [`pricing_core::lifecycle::deactivation_announced`]),
/// so the triggers index an instance while it is active or while a deactivation date is
/// set and not announced. A record without the field is read as before (announced once
/// written inactive at or after its date), so no row changes here.
pub(crate) const SCHEMA_V11: &str = r#"
DROP TRIGGER instances_index_insert;
DROP TRIGGER instances_index_update;

CREATE TRIGGER instances_index_insert AFTER INSERT ON instances
WHEN (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CASE json_type(new.record, '$.deactivationAnnounced')
             WHEN 'true' THEN 0
             WHEN 'false' THEN 1
             ELSE CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END))
BEGIN
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    VALUES (
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        CASE WHEN json_extract(new.record, '$.active') = 1 THEN MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807))
        ELSE CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END,
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'),
                    'active', json(CASE WHEN json_extract(new.record, '$.active') = 1
                                   THEN 'true' ELSE 'false' END))
    )
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;

CREATE TRIGGER instances_index_update AFTER UPDATE OF record ON instances
BEGIN
    DELETE FROM schedule_index
    WHERE project_id = new.project_id AND instance_id = new.instance_id
      AND NOT (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CASE json_type(new.record, '$.deactivationAnnounced')
             WHEN 'true' THEN 0
             WHEN 'false' THEN 1
             ELSE CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END));
    INSERT INTO schedule_index (project_id, instance_id, tenant, due_ms, record)
    SELECT
        new.project_id, new.instance_id,
        COALESCE((SELECT tenant FROM projects WHERE project_id = new.project_id), '?'),
        CASE WHEN json_extract(new.record, '$.active') = 1 THEN MIN(
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER), 0),
            COALESCE(CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER), 9223372036854775807))
        ELSE CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END,
        json_object('timeZone', json_extract(new.record, '$.timeZone'),
                    'deactivationDate', json_extract(new.record, '$.deactivationDate'),
                    'active', json(CASE WHEN json_extract(new.record, '$.active') = 1
                                   THEN 'true' ELSE 'false' END))
    WHERE (json_extract(new.record, '$.active') = 1
     OR (json_extract(new.record, '$.deactivationDate') IS NOT NULL
         AND CASE json_type(new.record, '$.deactivationAnnounced')
             WHEN 'true' THEN 0
             WHEN 'false' THEN 1
             ELSE CAST(ROUND((julianday(json_extract(new.record, '$.updatedAt')) - 2440587.5) * 86400000.0) AS INTEGER) < CAST(ROUND((julianday(json_extract(new.record, '$.deactivationDate')) - 2440587.5) * 86400000.0) AS INTEGER) END))
    ON CONFLICT (project_id, instance_id) DO UPDATE SET
        tenant = excluded.tenant, due_ms = excluded.due_ms, record = excluded.record;
END;
"#;

/// The instance fields an index row keeps.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexRecord {
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    deactivation_date: Option<Timestamp>,
    /// Rows written before schema version 7 are active instances'.
    #[serde(default = "active_before_v7")]
    active: bool,
}

fn active_before_v7() -> bool {
    true
}

impl ActiveInstances for EmbeddedStore {
    async fn scheduled_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> StoreResult<Vec<TenantId>> {
        let after = after.map(|t| t.to_string()).unwrap_or_default();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.on_reader("scheduled_tenants", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT DISTINCT tenant FROM schedule_index WHERE tenant > ?1
                 ORDER BY tenant LIMIT ?2",
            )?;
            let mut rows = stmt.query(params![after, limit])?;
            let mut tenants = Vec::new();
            while let Some(row) = rows.next()? {
                let t = text(row, 0)?;
                tenants.push(TenantId::from_claim(t).ok_or_else(|| {
                    DbError::Store(StoreError::Failed(format!("stored tenant {t:?}")))
                })?);
            }
            Ok(tenants)
        })
        .await
    }

    async fn due_instances(
        &self,
        tenant: &TenantId,
        now: Timestamp,
        limit: usize,
    ) -> StoreResult<DuePage> {
        let tenant = tenant.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.on_reader("due_instances", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.project_id, s.instance_id, s.due_ms, s.record, h.record
                 FROM schedule_index s LEFT JOIN state_headers h
                   ON h.project_id = s.project_id AND h.instance_id = s.instance_id
                 WHERE s.tenant = ?1 AND s.due_ms <= ?2
                 ORDER BY s.due_ms, s.project_id, s.instance_id LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![tenant.as_str(), now.millis(), limit])?;
            let mut page = DuePage::default();
            while let Some(row) = rows.next()? {
                let key = stored_instance_key(text(row, 0)?, text(row, 1)?)?;
                let due_ms: i64 = row.get(2)?;
                let due = Timestamp::from_millis(due_ms).ok_or_else(|| {
                    DbError::Store(StoreError::Failed(format!("due time {due_ms} of {key}")))
                })?;
                let header: Option<String> = row.get(4)?;
                match entry(&tenant, &key, due, text(row, 3)?, header.as_deref()) {
                    Ok(e) => page.items.push(e),
                    Err(error) => page.skipped.push(SkippedDue {
                        record: SkippedRecord {
                            key: key.to_string(),
                            error,
                        },
                        key,
                        due,
                    }),
                }
            }
            Ok(page)
        })
        .await
    }

    async fn reschedule(
        &self,
        key: &InstanceKey,
        due: Timestamp,
        until: Timestamp,
    ) -> StoreResult<bool> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_writer("reschedule", move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE schedule_index SET due_ms = ?4
                     WHERE project_id = ?1 AND instance_id = ?2 AND due_ms = ?3",
                )?
                .execute(params![project, instance, due.millis(), until.millis()])?;
            Ok(changed == 1)
        })
        .await
    }
}

impl SchedulerCursors for EmbeddedStore {
    async fn load_cursor(&self, step: &str) -> StoreResult<Option<String>> {
        let step = step.to_owned();
        self.on_reader("load_cursor", move |conn| {
            Ok(conn
                .prepare_cached("SELECT cursor FROM scheduler_cursors WHERE step = ?1")?
                .query_row(params![step], |r| r.get(0))
                .optional()?)
        })
        .await
    }

    async fn save_cursor(&self, step: &str, cursor: &str) -> StoreResult<()> {
        let (step, cursor) = (step.to_owned(), cursor.to_owned());
        self.on_writer("save_cursor", move |conn| {
            conn.prepare_cached(
                "INSERT INTO scheduler_cursors (step, cursor) VALUES (?1, ?2)
                 ON CONFLICT (step) DO UPDATE SET cursor = excluded.cursor",
            )?
            .execute(params![step, cursor])?;
            Ok(())
        })
        .await
    }
}

/// An index row with its header's schedule; the error names the record that failed.
fn entry(
    tenant: &TenantId,
    key: &InstanceKey,
    due: Timestamp,
    record: &str,
    header: Option<&str>,
) -> Result<ScheduleEntry, String> {
    let record: IndexRecord =
        serde_json::from_str(record).map_err(|e| format!("index record: {e}"))?;
    let schedule: Option<Schedule> = match header {
        Some(h) => {
            serde_json::from_str::<Header>(h)
                .map_err(|e| format!("state header: {e}"))?
                .schedule
        }
        None => None,
    };
    Ok(ScheduleEntry {
        key: key.clone(),
        tenant: tenant.clone(),
        due,
        time_zone: record.time_zone,
        deactivation_date: record.deactivation_date,
        active: record.active,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use pricing_contract::fixtures::{Run, header, instance, project};
    use pricing_core::ports::{ActiveInstances, InstanceStore, ProjectStore};
    use pricing_core::time::Timestamp;
    use serde_json::json;

    use crate::{EmbeddedStore, lock};

    /// The depth bomb of the review: a header whose meta nests 233 levels was stored by
    /// the old code and can never decode again. The due scan reports it with its key and
    /// due time (so the scheduler can set it aside) and returns every other due instance.
    #[tokio::test]
    async fn the_due_scan_skips_a_record_it_cannot_decode() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let run = Run::new("undecodable");
        let tenant = run.tenant("t");
        store
            .create_project(&project(&run.project_id("p"), &tenant, "P"))
            .await
            .unwrap();
        let keys: Vec<_> = (0..5)
            .map(|i| run.key_of(&tenant, "p", &format!("i{i}")))
            .collect();
        for key in &keys {
            store
                .create_instance(&instance(key, "I"), &header(0, json!({})))
                .await
                .unwrap();
        }
        let deep = format!("{}1{}", "{\"a\":".repeat(233), "}".repeat(233));
        let record = format!("{{\"meta\":{{\"x\":{deep}}},\"appliedSeq\":0}}");
        assert!(serde_json::from_str::<pricing_core::state::Header>(&record).is_err());
        lock(&store.inner.writer)
            .execute(
                "UPDATE state_headers SET record = ?1 WHERE project_id = ?2 AND instance_id = ?3",
                rusqlite::params![
                    record,
                    keys[1].project_storage_key(),
                    keys[1].instance_id.to_string()
                ],
            )
            .unwrap();
        let page = store
            .due_instances(&tenant, Timestamp::now(), 10)
            .await
            .expect("the scan goes on");
        let listed: Vec<_> = page.items.iter().map(|e| e.key.clone()).collect();
        let expected: Vec<_> = keys.iter().filter(|k| **k != keys[1]).cloned().collect();
        assert_eq!(listed, expected);
        assert_eq!(page.skipped.len(), 1);
        assert_eq!(page.skipped[0].key, keys[1]);
        assert_eq!(page.skipped[0].record.key, keys[1].to_string());
        assert!(
            page.skipped[0].record.error.contains("state header"),
            "{}",
            page.skipped[0].record.error
        );
    }

    /// A database of schema version 4 (no scheduler index) is upgraded on open: its
    /// active instances are indexed under their tenants, due at once; inactive ones are not.
    #[tokio::test]
    async fn a_version_4_database_indexes_its_active_instances() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        let run = Run::new("upgrade5");
        let tenant = run.tenant("t");
        let (on, off) = (
            run.key_of(&tenant, "p", "on"),
            run.key_of(&tenant, "p", "off"),
        );
        {
            let store = EmbeddedStore::open(&path).unwrap();
            store
                .create_project(&project(&run.project_id("p"), &tenant, "P"))
                .await
                .unwrap();
            let mut inactive = instance(&off, "I");
            inactive.active = false;
            for inst in [instance(&on, "I"), inactive] {
                store
                    .create_instance(&inst, &header(0, json!({})))
                    .await
                    .unwrap();
            }
            lock(&store.inner.writer)
                .execute_batch(
                    "DROP TRIGGER instances_index_insert; DROP TRIGGER instances_index_update;
                     DROP TRIGGER headers_schedule_changed; DROP TABLE schedule_index;
                     DROP TABLE scheduler_cursors; PRAGMA user_version = 4;",
                )
                .unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let page = store
            .due_instances(&tenant, Timestamp::from_millis(0).unwrap(), 10)
            .await
            .unwrap();
        let keys: Vec<_> = page.items.iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys, vec![on]);
        assert_eq!(page.items[0].time_zone.as_deref(), Some("Europe/Vienna"));
        assert_eq!(
            store.scheduled_tenants(None, 10).await.unwrap(),
            vec![tenant]
        );
    }

    /// Upgrading to version 7 indexes the inactive instances whose deactivation date awaits
    /// its event (due at that date), not those written after their date.
    #[tokio::test]
    async fn a_version_6_database_indexes_inactive_instances_awaiting_deactivation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v6.db");
        let run = Run::new("upgrade7");
        let tenant = run.tenant("t");
        let (waits, announced) = (
            run.key_of(&tenant, "p", "waits"),
            run.key_of(&tenant, "p", "announced"),
        );
        let date = Timestamp::parse("2030-01-01T00:00:00Z").unwrap();
        {
            let store = EmbeddedStore::open(&path).unwrap();
            store
                .create_project(&project(&run.project_id("p"), &tenant, "P"))
                .await
                .unwrap();
            for (key, deactivation) in [
                (&waits, date),
                (
                    &announced,
                    Timestamp::parse("2020-01-01T00:00:00Z").unwrap(),
                ),
            ] {
                let mut inst = instance(key, "I");
                inst.active = false;
                inst.deactivation_date = Some(deactivation);
                store
                    .create_instance(&inst, &header(0, json!({})))
                    .await
                    .unwrap();
            }
            // Version 6 indexed active instances only.
            lock(&store.inner.writer)
                .execute_batch("DELETE FROM schedule_index; PRAGMA user_version = 6;")
                .unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let page = store.due_instances(&tenant, date, 10).await.unwrap();
        let got: Vec<_> = page
            .items
            .iter()
            .map(|e| (e.key.clone(), e.due, e.active))
            .collect();
        assert_eq!(got, vec![(waits, date, false)]);
    }
}
