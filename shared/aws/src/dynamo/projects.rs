//! ProjectStore: the project item (`P#{pid}` / `PROJECT`) and the tenant's listing copy
//! (`T#{tenant}` / `P#{pid}`), written together in one transaction. Projects never change
//! after creation, so the copy cannot drift; listing is a strongly consistent query of
//! the tenant's partition (no index, so a project is listed as soon as it is created).
//! The same transaction moves the tenant's project counter (`T#{tenant}` / `PROJECTS`,
//! see `quotas.rs`), which the quota is checked against.

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use pricing_core::ids::{ProjectKey, TenantId};
use pricing_core::model::{Page, PageRequest, Project};
use pricing_core::ports::{ProjectStore, StoreError, StoreResult};

use super::keys::{self, PK, RECORD, SK, TENANT};
use super::quotas::Counter;
use super::{
    DynamoStore, Item, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_at,
    failed_count, get_s, s,
};
use crate::error::corrupt;

impl ProjectStore for DynamoStore {
    async fn create_project_within(&self, project: &Project, max: u64) -> StoreResult<bool> {
        const OP: &str = "create_project";
        let record = encode(OP, project)?;
        let put = |pk: String, sk: String| {
            built(
                OP,
                Put::builder()
                    .table_name(self.table())
                    .item(PK, s(pk))
                    .item(SK, s(sk))
                    .item(RECORD, s(record.clone()))
                    .item(TENANT, s(project.tenant.to_string()))
                    .condition_expression("attribute_not_exists(pk)")
                    .build(),
            )
            .map(|p| TransactWriteItem::builder().put(p).build())
        };
        let tenant_pk = keys::tenant_pk(&project.tenant);
        let counter = Counter {
            pk: &tenant_pk,
            sk: keys::PROJECT_COUNTER_SK,
            counts: keys::TENANT_PROJECT_PREFIX,
        };
        let conflict = || StoreError::Conflict(format!("project {} exists", project.project_id));
        for attempt in 1..=MAX_ATTEMPTS {
            let (count, counter_step) = self.counter_step(OP, &counter).await?;
            if count >= max {
                // A taken id is a Conflict whatever the quota (as on every store).
                return match self.get_project(&project.key()).await? {
                    Some(_) => Err(conflict()),
                    None => Ok(false),
                };
            }
            let actions = vec![
                put(
                    keys::project_pk(&project.key()),
                    keys::PROJECT_SK.to_owned(),
                )?,
                put(
                    tenant_pk.clone(),
                    keys::tenant_project_sk(&project.project_id),
                )?,
                counter_step,
            ];
            match self.transact(OP, actions).await? {
                Ok(()) => return Ok(true),
                Err(reasons) if failed_at(&reasons, 0) || failed_at(&reasons, 1) => {
                    return Err(conflict());
                }
                // The counter moved (another create of the tenant): read it again.
                Err(reasons) => {
                    tracing::debug!(
                        attempt,
                        failed = failed_count(&reasons),
                        "create_project cancelled; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: the tenant's project counter still contended after {MAX_ATTEMPTS} attempts"
        )))
    }

    async fn get_project(&self, key: &ProjectKey) -> StoreResult<Option<Project>> {
        const OP: &str = "get_project";
        self.get(OP, keys::project_pk(key), keys::PROJECT_SK)
            .await?
            .map(|item| project_of(OP, &item))
            .transpose()
    }

    async fn list_projects(
        &self,
        tenant: &TenantId,
        page: &PageRequest,
    ) -> StoreResult<Page<Project>> {
        const OP: &str = "list_projects";
        let pk = keys::tenant_pk(tenant);
        let mut q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(pk.clone()))
            .value(":prefix", s(keys::TENANT_PROJECT_PREFIX))
            .max(page.limit.saturating_add(1));
        if let Some(cursor) = &page.cursor {
            q = q.after(pk, format!("{}{cursor}", keys::TENANT_PROJECT_PREFIX));
        }
        let items = self.query(OP, q).await?;
        let projects = items
            .iter()
            .map(|i| project_of(OP, i))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(page_of(projects, page.limit, |p| p.project_id.to_string()))
    }
}

fn project_of(op: &str, item: &Item) -> StoreResult<Project> {
    let mut project: Project = decode(op, item)?;
    // The record's JSON leaves the tenant out (it is never shown to clients).
    let tenant = get_s(op, item, TENANT)?;
    project.tenant = TenantId::from_claim(tenant)
        .ok_or_else(|| corrupt(op, format!("stored tenant {tenant:?} is not valid")))?;
    Ok(project)
}

/// Cuts the extra item off (fetched to learn whether there is a next page) and makes the
/// cursor: the id of the page's last item.
pub(crate) fn page_of<T>(mut items: Vec<T>, limit: usize, key: impl Fn(&T) -> String) -> Page<T> {
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(key)
    } else {
        None
    };
    Page { items, next }
}
