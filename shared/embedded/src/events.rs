//! EventStore: events in insertion order per instance (written by `StateStore::commit`,
//! `PriceStore::save_calculation` and `append_events`), and the outbox: `event_heads`
//! holds each instance's last position and dispatch mark (see `db.rs`, version 3).

use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{EventStore, MAX_COMMIT_RECORDS, StoreError, StoreResult};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, stored_instance_key, text};

impl EventStore for EmbeddedStore {
    async fn list_events(
        &self,
        key: &InstanceKey,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let after = after.map(str::to_owned);
        self.on_reader("list_events", move |conn| {
            let tx = conn.transaction()?;
            let after_pos: i64 = match after {
                None => 0,
                Some(id) => tx
                    .prepare_cached(
                        "SELECT pos FROM events
                         WHERE project_id = ?1 AND instance_id = ?2 AND event_id = ?3",
                    )?
                    .query_row(params![project, instance, id], |r| r.get(0))
                    .optional()?
                    // An unknown cursor is an error, not an empty page: a consumer that
                    // lost its place must notice.
                    .ok_or(StoreError::NotFound)?,
            };
            let mut out = Vec::new();
            {
                let mut stmt = tx.prepare_cached(
                    "SELECT record FROM events
                     WHERE project_id = ?1 AND instance_id = ?2 AND pos > ?3
                     ORDER BY pos LIMIT ?4",
                )?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut rows = stmt.query(params![project, instance, after_pos, limit])?;
                while let Some(row) = rows.next()? {
                    out.push(serde_json::from_str::<Event>(text(row, 0)?)?);
                }
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn append_events(&self, key: &InstanceKey, events: &[Event]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        if events.len() > MAX_COMMIT_RECORDS {
            return Err(StoreError::Failed(format!(
                "append_events: {} events exceed the limit of {MAX_COMMIT_RECORDS} per call",
                events.len()
            )));
        }
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let encoded = events
            .iter()
            .map(|e| Ok((e.id.clone(), serde_json::to_string(e)?)))
            .collect::<serde_json::Result<Vec<_>>>()
            .map_err(|e| StoreError::Failed(format!("append_events: encoding an event: {e}")))?;
        self.on_writer("append_events", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                // Event ids are deterministic: one already stored is skipped.
                let mut insert = tx.prepare_cached(
                    "INSERT INTO events (project_id, instance_id, event_id, record)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (project_id, instance_id, event_id) DO NOTHING",
                )?;
                for (id, record) in &encoded {
                    insert.execute(params![project, instance, id, record])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn undispatched_events(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("undispatched_events", move |conn| {
            let tx = conn.transaction()?;
            let mark = dispatched_pos(&tx, &project, &instance)?;
            let mut out = Vec::new();
            {
                let mut stmt = tx.prepare_cached(
                    "SELECT record FROM events
                     WHERE project_id = ?1 AND instance_id = ?2 AND pos > ?3
                     ORDER BY pos LIMIT ?4",
                )?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut rows = stmt.query(params![project, instance, mark, limit])?;
                while let Some(row) = rows.next()? {
                    out.push(serde_json::from_str::<Event>(text(row, 0)?)?);
                }
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn mark_dispatched(&self, key: &InstanceKey, through: &str) -> StoreResult<()> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let through = through.to_owned();
        self.on_writer("mark_dispatched", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let pos: i64 = tx
                .prepare_cached(
                    "SELECT pos FROM events
                     WHERE project_id = ?1 AND instance_id = ?2 AND event_id = ?3",
                )?
                .query_row(params![project, instance, through], |r| r.get(0))
                .optional()?
                .ok_or(StoreError::NotFound)?;
            // The event's insert created the head row (trigger); MAX: only forward.
            tx.prepare_cached(
                "UPDATE event_heads SET dispatched_pos = MAX(dispatched_pos, ?3)
                 WHERE project_id = ?1 AND instance_id = ?2",
            )?
            .execute(params![project, instance, pos])?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn instances_with_undispatched_events(
        &self,
        limit: usize,
    ) -> StoreResult<Vec<InstanceKey>> {
        self.on_reader("instances_with_undispatched_events", move |conn| {
            let mut stmt = conn.prepare_cached(UNDISPATCHED_INSTANCES)?;
            let mut rows = stmt.query(params![i64::try_from(limit).unwrap_or(i64::MAX)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let (project, instance) = (text(row, 0)?, text(row, 1)?);
                let key = stored_instance_key(project, instance)?;
                out.push(key);
            }
            Ok(out)
        })
        .await
    }
}

/// Instances with events after their dispatch mark (served by the partial index
/// `event_heads_undispatched`).
pub(crate) const UNDISPATCHED_INSTANCES: &str = "SELECT project_id, instance_id FROM event_heads
     WHERE last_pos > dispatched_pos
     ORDER BY project_id, instance_id LIMIT ?1";

/// The position of the instance's last dispatched event (0: none yet).
fn dispatched_pos(conn: &Connection, project: &str, instance: &str) -> DbResult<i64> {
    Ok(conn
        .prepare_cached(
            "SELECT dispatched_pos FROM event_heads WHERE project_id = ?1 AND instance_id = ?2",
        )?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}
