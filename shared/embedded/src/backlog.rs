//! Backlog: instances whose log head is ahead of their applied state.

use pricing_core::ids::InstanceKey;
use pricing_core::ports::{Backlog, StoreResult};
use rusqlite::params;

use crate::EmbeddedStore;
use crate::db::{stored_instance_key, text};

impl Backlog for EmbeddedStore {
    async fn instances_behind(&self, limit: usize) -> StoreResult<Vec<InstanceKey>> {
        self.on_reader("instances_behind", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT l.project_id, l.instance_id FROM log_heads l
                 LEFT JOIN state_headers h
                   ON h.project_id = l.project_id AND h.instance_id = l.instance_id
                 WHERE l.last_seq > COALESCE(h.applied_seq, 0)
                 ORDER BY l.project_id, l.instance_id
                 LIMIT ?1",
            )?;
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
