//! ProjectStore: one row per project, listed per tenant in project id order.

use pricing_core::ids::{ProjectKey, TenantId};
use pricing_core::model::{Page, PageRequest, Project};
use pricing_core::ports::{ProjectStore, StoreError, StoreResult};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::db::{DbResult, is_duplicate_key, text};
use crate::{EmbeddedStore, Inner};

impl ProjectStore for EmbeddedStore {
    async fn create_project_within(&self, project: &Project, max: u64) -> StoreResult<bool> {
        let id = project.key().storage_key();
        let tenant = project.tenant.to_string();
        let project_id = project.project_id.clone();
        let record = serde_json::to_string(project)
            .map_err(|e| StoreError::Failed(format!("create_project: {e}")))?;
        // The count and the insert in one write transaction: the writer is the only one, so
        // racing creators are counted one after the other.
        let inner = self.inner.clone();
        self.on_writer("create_project", move |conn| {
            let _noted = RecordsChanged(&inner);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let exists: bool = tx
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM projects WHERE project_id = ?1)")?
                .query_row(params![id], |r| r.get(0))?;
            if exists {
                return Err(StoreError::Conflict(format!("project {project_id} exists")).into());
            }
            let count: i64 = tx
                .prepare_cached("SELECT COUNT(*) FROM projects WHERE tenant = ?1")?
                .query_row(params![tenant], |r| r.get(0))?;
            if u64::try_from(count).unwrap_or(0) >= max {
                return Ok(false);
            }
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO projects (project_id, tenant, record) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![id, tenant, record]);
            match inserted {
                Ok(_) => {}
                Err(e) if is_duplicate_key(&e) => {
                    return Err(StoreError::Conflict(format!("project {project_id} exists")).into());
                }
                Err(e) => return Err(e.into()),
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn get_project(&self, key: &ProjectKey) -> StoreResult<Option<Project>> {
        let id = key.storage_key();
        // Every entries request reads its project: kept in memory (`records.rs`).
        let seen = match self.inner.records.project(&id) {
            Ok(project) => return Ok(Some(project)),
            Err(seen) => seen,
        };
        let read_id = id.clone();
        let project = self
            .on_reader_inline("get_project", move |conn| {
                let row = conn
                    .prepare_cached("SELECT tenant, record FROM projects WHERE project_id = ?1")?
                    .query_row(params![read_id], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                    })
                    .optional()?;
                row.map(|(tenant, record)| decode(&tenant, &record))
                    .transpose()
            })
            .await?;
        if let Some(p) = &project {
            self.inner.records.keep_project(seen, id, p);
        }
        Ok(project)
    }

    async fn list_projects(
        &self,
        tenant: &TenantId,
        page: &PageRequest,
    ) -> StoreResult<Page<Project>> {
        // Keys are `{tenant}/{project}`: a tenant's projects are one range, in project id
        // order, and the cursor (a project id) is resumed within it.
        let prefix = format!("{}/", tenant.key_component());
        let after = format!("{prefix}{}", page.cursor.as_deref().unwrap_or_default());
        let tenant = tenant.to_string();
        let limit = page.limit;
        self.on_reader("list_projects", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT tenant, record FROM projects WHERE tenant = ?1 AND project_id > ?2
                 ORDER BY project_id LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![tenant, after, fetch_limit(limit)])?;
            let mut items = Vec::new();
            while let Some(row) = rows.next()? {
                items.push(decode(text(row, 0)?, text(row, 1)?)?);
            }
            Ok(page_of(items, limit, |p: &Project| {
                p.project_id.to_string()
            }))
        })
        .await
    }
}

fn decode(tenant: &str, record: &str) -> DbResult<Project> {
    let mut project: Project = serde_json::from_str(record)?;
    // The record's JSON form leaves the tenant out (it is never shown to clients).
    project.tenant = TenantId::from_claim(tenant)
        .ok_or_else(|| StoreError::Failed(format!("stored tenant {tenant:?} is not valid")))?;
    Ok(project)
}

/// One more row than the page holds tells whether there is a next page.
pub(crate) fn fetch_limit(limit: usize) -> i64 {
    i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX)
}

/// Cuts the extra row off and makes the cursor: the key of the page's last item.
pub(crate) fn page_of<T>(mut items: Vec<T>, limit: usize, key: impl Fn(&T) -> String) -> Page<T> {
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(key)
    } else {
        None
    };
    Page { items, next }
}

/// Notes a write of a project or instance record for the kept copies (`records.rs`) when
/// dropped: after the writing closure returned (its transaction committed or rolled back),
/// while it still holds the writer connection, on every path out of it.
pub(crate) struct RecordsChanged<'a>(pub(crate) &'a Inner);

impl Drop for RecordsChanged<'_> {
    fn drop(&mut self) {
        self.0.records.changed();
    }
}
