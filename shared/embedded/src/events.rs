//! EventStore: events in insertion order per instance (written by `StateStore::commit`).

use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{EventStore, StoreError, StoreResult};
use rusqlite::{OptionalExtension, params};

use crate::EmbeddedStore;
use crate::db::text;

impl EventStore for EmbeddedStore {
    async fn list_events(
        &self,
        key: &InstanceKey,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let project = key.project_id.to_string();
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
}
