//! InstanceStore: instance items in their project's partition (`P#{pid}` / `I#{iid}`);
//! creating one also writes its state header (`I#{pid}/{iid}` / `HEAD`) and moves the
//! project's instance counter (`P#{pid}` / `INSTANCES`, see `quotas.rs`) in the same
//! transaction.

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use pricing_core::ids::{InstanceKey, ProjectKey};
use pricing_core::model::{Instance, Page, PageRequest};
use pricing_core::ports::{InstanceStore, StoreError, StoreResult};
use pricing_core::state::Header;
use pricing_core::time::Timestamp;

use super::keys::{self, APPLIED_SEQ, PK, RECORD, REV, SK, UPDATED_AT};
use super::projects::page_of;
use super::quotas::Counter;
use super::{
    DynamoStore, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_at, failed_count, n, s,
};

impl InstanceStore for DynamoStore {
    async fn create_instance_within(
        &self,
        instance: &Instance,
        header: &Header,
        max: u64,
    ) -> StoreResult<bool> {
        const OP: &str = "create_instance";
        let key = instance.key();
        let instance_put = built(
            OP,
            Put::builder()
                .table_name(self.table())
                .set_item(Some(instance_item(OP, instance)?))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let header_put = built(
            OP,
            Put::builder()
                .table_name(self.table())
                .item(PK, s(keys::instance_pk(&key)))
                .item(SK, s(keys::HEAD_SK))
                .item(RECORD, s(encode(OP, header)?))
                .item(APPLIED_SEQ, n(header.applied_seq))
                .item(REV, n(0))
                .condition_expression("attribute_not_exists(pk)")
                .build(),
        )?;
        let project_pk = keys::project_pk(&key.project());
        let counter = Counter {
            pk: &project_pk,
            sk: keys::INSTANCE_COUNTER_SK,
            counts: keys::INSTANCE_PREFIX,
        };
        let conflict = || StoreError::Conflict(format!("instance {key} exists"));
        let index = self.index_writes(OP, instance, false).await?;
        for attempt in 1..=MAX_ATTEMPTS {
            let (count, counter_step) = self.counter_step(OP, &counter).await?;
            if count >= max {
                // A taken id is a Conflict whatever the quota (as on every store).
                return match self.get_instance(&key).await? {
                    Some(_) => Err(conflict()),
                    None => Ok(false),
                };
            }
            let actions: Vec<_> = [
                TransactWriteItem::builder()
                    .put(instance_put.clone())
                    .build(),
                TransactWriteItem::builder().put(header_put.clone()).build(),
                counter_step,
            ]
            .into_iter()
            .chain(index.iter().cloned())
            .collect();
            match self.transact(OP, actions).await? {
                Ok(()) => return Ok(true),
                Err(reasons) if failed_at(&reasons, 0) || failed_at(&reasons, 1) => {
                    return Err(conflict());
                }
                // The counter moved (another create in the project): read it again.
                Err(reasons) => {
                    tracing::debug!(
                        attempt,
                        failed = failed_count(&reasons),
                        "create_instance cancelled; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: the instance counter of {} still contended after {MAX_ATTEMPTS} attempts",
            key.project_id
        )))
    }

    async fn get_instance(&self, key: &InstanceKey) -> StoreResult<Option<Instance>> {
        const OP: &str = "get_instance";
        self.get(
            OP,
            keys::project_pk(&key.project()),
            &keys::instance_sk(&key.instance_id),
        )
        .await?
        .map(|item| decode(OP, &item))
        .transpose()
    }

    async fn list_instances(
        &self,
        project: &ProjectKey,
        page: &PageRequest,
    ) -> StoreResult<Page<Instance>> {
        const OP: &str = "list_instances";
        let pk = keys::project_pk(project);
        let mut q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(pk.clone()))
            .value(":prefix", s(keys::INSTANCE_PREFIX))
            .max(page.limit.saturating_add(1));
        if let Some(cursor) = &page.cursor {
            q = q.after(pk, format!("{}{cursor}", keys::INSTANCE_PREFIX));
        }
        let instances = self
            .query(OP, q)
            .await?
            .iter()
            .map(|i| decode::<Instance>(OP, i))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(page_of(instances, page.limit, |i| {
            i.instance_id.to_string()
        }))
    }

    /// The instance item and its scheduler index entry (`schedule.rs`) in one transaction,
    /// if the item's `updated_at` is still what was read (an item written before that
    /// attribute was kept is replaced once unconditionally: it has none to compare).
    async fn put_instance(&self, instance: &Instance, if_updated_at: Timestamp) -> StoreResult<()> {
        const OP: &str = "put_instance";
        let put = built(
            OP,
            Put::builder()
                .table_name(self.table())
                .set_item(Some(instance_item(OP, instance)?))
                .condition_expression(
                    "attribute_exists(pk) AND (#u = :read OR attribute_not_exists(#u))",
                )
                .expression_attribute_names("#u", UPDATED_AT)
                .expression_attribute_values(":read", s(if_updated_at.to_rfc3339()))
                .build(),
        )?;
        let mut actions = vec![TransactWriteItem::builder().put(put).build()];
        actions.extend(self.index_writes(OP, instance, true).await?);
        match self.transact(OP, actions).await? {
            Ok(()) => Ok(()),
            Err(reasons) if failed_at(&reasons, 0) => {
                match self.get_instance(&instance.key()).await? {
                    None => Err(StoreError::NotFound),
                    Some(_) => Err(StoreError::Conflict(format!(
                        "instance {} was written since it was read",
                        instance.key()
                    ))),
                }
            }
            // Another transaction on the instance item or its index entries at the same
            // moment (two PUTs at once): read it again and apply the change to what the
            // other wrote, as after a failed condition.
            Err(reasons) => Err(StoreError::Conflict(format!(
                "{OP}: another write of instance {} at the same moment: {reasons:?}",
                instance.key()
            ))),
        }
    }
}

/// The instance item (the scheduler's index entry is an item of its own, `SCHED`).
fn instance_item(op: &str, instance: &Instance) -> StoreResult<super::Item> {
    let key = instance.key();
    Ok(super::Item::from([
        (PK.to_owned(), s(keys::project_pk(&key.project()))),
        (SK.to_owned(), s(keys::instance_sk(&key.instance_id))),
        (RECORD.to_owned(), s(encode(op, instance)?)),
        (UPDATED_AT.to_owned(), s(instance.updated_at.to_rfc3339())),
    ]))
}
