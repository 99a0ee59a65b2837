//! Quota counters: the number of records a quota limits, kept in one counter item that
//! every create moves in the create's own transaction (so racing creators cannot pass the
//! quota) and read before it (a strongly consistent GetItem).
//!
//! | pk | sk | counts |
//! |---|---|---|
//! | `T#{tenant}` | `PROJECTS` | the tenant's projects (listing copies `P#…` beside it) |
//! | `P#{pid}` | `INSTANCES` | the project's instances (items `I#…` beside it) |
//!
//! A counter that does not exist yet (a table written before counters, or the first
//! create) starts from a count of the records it counts: one paged `Select: COUNT` query
//! of its partition, once.

use aws_sdk_dynamodb::types::{Put, Select, TransactWriteItem, Update};
use pricing_core::ports::StoreResult;

use super::keys::{COUNT, PK, SK};
use super::{DynamoStore, built, get_n_opt, n, s};
use crate::error::store_error;

/// One quota counter: its item and the records beside it that it counts.
pub(crate) struct Counter<'a> {
    pub pk: &'a str,
    pub sk: &'static str,
    /// The sort key prefix of the counted records in the same partition.
    pub counts: &'static str,
}

impl DynamoStore {
    /// The counter's value now, and the transaction action that moves it to value + 1 if
    /// nobody moved it meanwhile (the transaction is cancelled otherwise: read again).
    pub(crate) async fn counter_step(
        &self,
        op: &str,
        counter: &Counter<'_>,
    ) -> StoreResult<(u64, TransactWriteItem)> {
        let stored = self.get(op, counter.pk.to_owned(), counter.sk).await?;
        let action = match &stored {
            Some(item) => {
                let count = get_n_opt(op, item, COUNT)?.unwrap_or(0);
                let update = Update::builder()
                    .table_name(self.table())
                    .key(PK, s(counter.pk))
                    .key(SK, s(counter.sk))
                    .update_expression("SET n = :next")
                    .condition_expression("n = :read")
                    .expression_attribute_values(":next", n(count + 1))
                    .expression_attribute_values(":read", n(count));
                (
                    count,
                    TransactWriteItem::builder()
                        .update(built(op, update.build())?)
                        .build(),
                )
            }
            None => {
                let count = self.count_records(op, counter).await?;
                let put = Put::builder()
                    .table_name(self.table())
                    .item(PK, s(counter.pk))
                    .item(SK, s(counter.sk))
                    .item(COUNT, n(count + 1))
                    .condition_expression("attribute_not_exists(pk)");
                (
                    count,
                    TransactWriteItem::builder()
                        .put(built(op, put.build())?)
                        .build(),
                )
            }
        };
        Ok(action)
    }

    /// The records a counter counts, by a strongly consistent COUNT query (paged).
    async fn count_records(&self, op: &str, counter: &Counter<'_>) -> StoreResult<u64> {
        let mut total: u64 = 0;
        let mut start = None;
        loop {
            let page = self
                .client()
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(counter.pk))
                .expression_attribute_values(":prefix", s(counter.counts))
                .select(Select::Count)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| store_error(op, e))?;
            total += u64::try_from(page.count).unwrap_or(0);
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k),
                None => return Ok(total),
            }
        }
    }
}
