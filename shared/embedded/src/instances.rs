//! InstanceStore: one row per instance; creating one also writes its initial state header.

use pricing_core::ids::{InstanceKey, ProjectKey};
use pricing_core::model::{Instance, Page, PageRequest};
use pricing_core::ports::{InstanceStore, StoreError, StoreResult};
use pricing_core::state::Header;
use pricing_core::time::Timestamp;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{is_duplicate_key, text, to_i64};
use crate::projects::{RecordsChanged, fetch_limit, page_of};

impl InstanceStore for EmbeddedStore {
    async fn create_instance_within(
        &self,
        instance: &Instance,
        header: &Header,
        max: u64,
    ) -> StoreResult<bool> {
        let project = instance.key().project_storage_key();
        let id = instance.instance_id.to_string();
        let encode = |e: serde_json::Error| StoreError::Failed(format!("create_instance: {e}"));
        let record = serde_json::to_string(instance).map_err(encode)?;
        let header_record = serde_json::to_string(header).map_err(encode)?;
        let applied = header.applied_seq;
        let inner = self.inner.clone();
        self.on_writer("create_instance", move |conn| {
            let _noted = RecordsChanged(&inner);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let conflict =
                || StoreError::Conflict(format!("instance {project}/{id} exists")).into();
            // Counted in the write transaction: racing creators are counted in turn.
            let (exists, count): (bool, i64) = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM instances WHERE project_id = ?1
                                    AND instance_id = ?2),
                            (SELECT COUNT(*) FROM instances WHERE project_id = ?1)",
                )?
                .query_row(params![project, id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            if exists {
                return Err(conflict());
            }
            if u64::try_from(count).unwrap_or(0) >= max {
                return Ok(false);
            }
            match tx
                .prepare_cached(
                    "INSERT INTO instances (project_id, instance_id, record) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![project, id, record])
            {
                Ok(_) => {}
                Err(e) if is_duplicate_key(&e) => return Err(conflict()),
                Err(e) => return Err(e.into()),
            }
            match tx
                .prepare_cached(
                    "INSERT INTO state_headers (project_id, instance_id, applied_seq, record)
                     VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    project,
                    id,
                    to_i64(applied, "applied sequence")?,
                    header_record
                ]) {
                Ok(_) => {}
                Err(e) if is_duplicate_key(&e) => return Err(conflict()),
                Err(e) => return Err(e.into()),
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn get_instance(&self, key: &InstanceKey) -> StoreResult<Option<Instance>> {
        let project = key.project_storage_key();
        let id = key.instance_id.to_string();
        // Every entries request reads its instance: kept in memory (`records.rs`).
        let seen = match self.inner.records.instance(&project, &id) {
            Ok(instance) => return Ok(Some(instance)),
            Err(seen) => seen,
        };
        let (read_project, read_id) = (project.clone(), id.clone());
        let instance = self
            .on_reader_inline("get_instance", move |conn| {
                let record: Option<String> = conn
                    .prepare_cached(
                        "SELECT record FROM instances WHERE project_id = ?1 AND instance_id = ?2",
                    )?
                    .query_row(params![read_project, read_id], |r| r.get(0))
                    .optional()?;
                Ok(record
                    .map(|r| serde_json::from_str::<Instance>(&r))
                    .transpose()?)
            })
            .await?;
        if let Some(i) = &instance {
            self.inner.records.keep_instance(seen, project, id, i);
        }
        Ok(instance)
    }

    async fn list_instances(
        &self,
        project: &ProjectKey,
        page: &PageRequest,
    ) -> StoreResult<Page<Instance>> {
        let project = project.storage_key();
        let after = page.cursor.clone().unwrap_or_default();
        let limit = page.limit;
        self.on_reader("list_instances", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM instances WHERE project_id = ?1 AND instance_id > ?2
                 ORDER BY instance_id LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![project, after, fetch_limit(limit)])?;
            let mut items = Vec::new();
            while let Some(row) = rows.next()? {
                items.push(serde_json::from_str::<Instance>(text(row, 0)?)?);
            }
            Ok(page_of(items, limit, |i: &Instance| {
                i.instance_id.to_string()
            }))
        })
        .await
    }

    async fn put_instance(&self, instance: &Instance, if_updated_at: Timestamp) -> StoreResult<()> {
        let project = instance.key().project_storage_key();
        let id = instance.instance_id.to_string();
        let record = serde_json::to_string(instance)
            .map_err(|e| StoreError::Failed(format!("put_instance: {e}")))?;
        let inner = self.inner.clone();
        let key = instance.key();
        self.on_writer("put_instance", move |conn| {
            // The writer is the database's only one: what it reads here is what it replaces.
            let stored: Option<String> = conn
                .prepare_cached(
                    "SELECT record FROM instances WHERE project_id = ?1 AND instance_id = ?2",
                )?
                .query_row(params![project, id], |row| row.get(0))
                .optional()?;
            let Some(stored) = stored else {
                return Err(StoreError::NotFound.into());
            };
            let Written { updated_at } = serde_json::from_str(&stored)?;
            if updated_at != if_updated_at {
                return Err(StoreError::Conflict(format!(
                    "instance {key} was written since it was read"
                ))
                .into());
            }
            let _noted = RecordsChanged(&inner);
            conn.prepare_cached(
                "UPDATE instances SET record = ?3 WHERE project_id = ?1 AND instance_id = ?2",
            )?
            .execute(params![project, id, record])?;
            Ok(())
        })
        .await
    }
}

/// The field of a stored instance record that a replace is conditional on.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Written {
    updated_at: Timestamp,
}
