//! Backlog: a sparse index entry on the `LOG` item. Every append sets
//! `gsi1pk = BACKLOG#{shard}`, `gsi1sk = I#{pid}/{iid}`; a commit that catches up with the
//! log removes them (conditioned on `last_seq <= applied`, so an append in between keeps
//! the marker). The index is only a list of candidates: each is checked against the
//! strongly consistent `LOG` and `HEAD` items, and stale markers (left by a commit whose
//! cleanup failed) are cleared here, conditioned on the `last_seq` just read.

use std::collections::HashMap;
use std::future::Future;

use pricing_core::ids::InstanceKey;
use pricing_core::ports::{Backlog, StoreResult};

use super::keys::{self, APPLIED_SEQ, BACKLOG_SHARDS, LAST_SEQ, PK, SK};
use super::{DynamoStore, Item, Query, get_n_opt, get_s, is_condition_failed, n, s};
use crate::error::store_error;

/// Candidates read from a marker index (backlog, outbox) per page.
const PAGE: usize = 100;

impl Backlog for DynamoStore {
    async fn instances_behind(&self, limit: usize) -> StoreResult<Vec<InstanceKey>> {
        self.sharded_candidates(
            "instances_behind",
            BACKLOG_SHARDS,
            keys::backlog_shard_pk,
            limit,
            |candidates| async move { self.check_candidates(&candidates).await },
        )
        .await
    }
}

impl DynamoStore {
    /// Instances marked on a sharded sparse `gsi1` partition (`shard_pk(0..shards)`), each
    /// page of candidates confirmed by `check` (which clears stale markers), at most
    /// `limit`. The scan starts at a random shard, so that a shard full of instances that
    /// keep failing does not starve the others when `limit` is small.
    pub(super) async fn sharded_candidates<F, Fut>(
        &self,
        op: &str,
        shards: u32,
        shard_pk: fn(u32) -> String,
        limit: usize,
        mut check: F,
    ) -> StoreResult<Vec<InstanceKey>>
    where
        F: FnMut(Vec<Item>) -> Fut,
        Fut: Future<Output = StoreResult<Vec<InstanceKey>>>,
    {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let first = u32::try_from(ulid::Ulid::new().random() % u128::from(shards)).unwrap_or(0);
        for i in 0..shards {
            let mut q = Query::new("gsi1pk = :shard")
                .value(":shard", s(shard_pk((first + i) % shards)))
                .max(PAGE);
            q.index = Some(keys::GSI1);
            loop {
                let (candidates, next) = self.query_page(op, &q).await?;
                for key in check(candidates).await? {
                    out.push(key);
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
                match next {
                    Some(k) => q.start = Some(k),
                    None => break,
                }
            }
        }
        Ok(out)
    }
}

impl DynamoStore {
    /// The candidates whose log is ahead of their state, in index order; clears the
    /// markers of the others.
    async fn check_candidates(&self, candidates: &[Item]) -> StoreResult<Vec<InstanceKey>> {
        const OP: &str = "instances_behind";
        let mut pks = Vec::with_capacity(candidates.len());
        for c in candidates {
            let pk = get_s(OP, c, PK)?;
            match keys::parse_instance_pk(pk) {
                Some(key) => pks.push((pk.to_owned(), key)),
                None => tracing::warn!(pk, "backlog marker on an unexpected item; skipped"),
            }
        }
        if pks.is_empty() {
            return Ok(Vec::new());
        }
        let wanted = pks
            .iter()
            .flat_map(|(pk, _)| {
                [
                    (pk.clone(), keys::LOG_SK.to_owned()),
                    (pk.clone(), keys::HEAD_SK.to_owned()),
                ]
            })
            .collect();
        let mut last: HashMap<String, u64> = HashMap::new();
        let mut applied: HashMap<String, u64> = HashMap::new();
        for item in self.batch_get(OP, wanted).await? {
            let pk = get_s(OP, &item, PK)?.to_owned();
            match get_s(OP, &item, SK)? {
                keys::LOG_SK => {
                    last.insert(pk, get_n_opt(OP, &item, LAST_SEQ)?.unwrap_or(0));
                }
                _ => {
                    applied.insert(pk, get_n_opt(OP, &item, APPLIED_SEQ)?.unwrap_or(0));
                }
            }
        }
        let mut behind = Vec::new();
        for (pk, key) in pks {
            let last = last.get(&pk).copied().unwrap_or(0);
            if last > applied.get(&pk).copied().unwrap_or(0) {
                behind.push(key);
            } else {
                self.clear_stale_marker(&pk, last).await?;
            }
        }
        Ok(behind)
    }

    async fn clear_stale_marker(&self, pk: &str, last: u64) -> StoreResult<()> {
        const OP: &str = "instances_behind: clear a stale marker";
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
            .update_expression("REMOVE gsi1pk, gsi1sk")
            .condition_expression("attribute_exists(gsi1pk) AND last_seq = :last")
            .expression_attribute_values(":last", n(last))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Appended meanwhile (the marker is current again) or cleared by a commit.
            Err(e) if is_condition_failed(&e) => Ok(()),
            Err(e) => Err(store_error(OP, e)),
        }
    }
}
