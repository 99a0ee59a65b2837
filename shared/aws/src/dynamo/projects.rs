//! ProjectStore: the project item (`P#{pid}` / `PROJECT`) and the tenant's listing copy
//! (`T#{tenant}` / `P#{pid}`), written together in one transaction. Projects never change
//! after creation, so the copy cannot drift; listing is a strongly consistent query of
//! the tenant's partition (no index, so a project is listed as soon as it is created).

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use pricing_core::ids::{ProjectId, TenantId};
use pricing_core::model::{Page, PageRequest, Project};
use pricing_core::ports::{ProjectStore, StoreError, StoreResult};

use super::keys::{self, PK, RECORD, SK, TENANT};
use super::{DynamoStore, Item, Query, built, decode, encode, get_s, s};
use crate::error::corrupt;

impl ProjectStore for DynamoStore {
    async fn create_project(&self, project: &Project) -> StoreResult<()> {
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
        let actions = vec![
            put(
                keys::project_pk(&project.project_id),
                keys::PROJECT_SK.to_owned(),
            )?,
            put(
                keys::tenant_pk(&project.tenant),
                keys::tenant_project_sk(&project.project_id),
            )?,
        ];
        match self.transact(OP, actions).await? {
            Ok(()) => Ok(()),
            Err(reasons)
                if reasons
                    .iter()
                    .flatten()
                    .any(|r| r == "ConditionalCheckFailed") =>
            {
                Err(StoreError::Conflict(format!(
                    "project {} exists",
                    project.project_id
                )))
            }
            Err(reasons) => Err(StoreError::Unavailable(format!(
                "{OP}: transaction cancelled: {reasons:?}"
            ))),
        }
    }

    async fn get_project(&self, id: &ProjectId) -> StoreResult<Option<Project>> {
        const OP: &str = "get_project";
        self.get(OP, keys::project_pk(id), keys::PROJECT_SK)
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
