//! StateStore: the header `HEAD` (`record`, `applied_seq`, `rev`), items `ITEM#{id}` and
//! products `PROD#{id}` in the instance's partition; a commit also writes its events
//! (see `events.rs`).
//!
//! A commit is one TransactWriteItems call conditioned on the header it read:
//! `applied_seq = expected AND rev = read rev` (or no header at all when the instance has
//! none, which counts as applied sequence 0). `rev` counts commits, so two commits that
//! build on the same header cannot both land, and `load_state` can tell whether a commit
//! landed while it read. Actions: header + items + products + new events + event batch +
//! event counter <= 92, within the 100 of one transaction for any commit of
//! `MAX_COMMIT_RECORDS` records.

use std::collections::{BTreeMap, HashSet};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{
    Commit, MAX_COMMIT_RECORDS, ProjectSales, StateStore, StoreError, StoreResult,
};
use pricing_core::state::{InstanceState, ItemState, ProductState};

use super::keys::{self, APPLIED_SEQ, PK, RECORD, REV, SK};
use super::{
    DynamoStore, Item, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_at,
    failed_count, get_n, get_n_opt, get_s, is_condition_failed, n, s,
};

/// Loads retried when a commit lands while the state is being read.
const LOAD_ATTEMPTS: u32 = 8;

/// The header as stored: the applied sequence and the commit count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeadVersion {
    applied: u64,
    rev: Option<u64>,
    /// The stored header's pricing schedule as JSON (`None`: it did not decode).
    schedule: Option<serde_json::Value>,
}

/// The schedule of a stored header record, without decoding the rest of it.
#[derive(serde::Deserialize)]
struct HeadSchedule {
    #[serde(default)]
    schedule: serde_json::Value,
}

impl StateStore for DynamoStore {
    async fn load_state(&self, key: &InstanceKey) -> StoreResult<InstanceState> {
        const OP: &str = "load_state";
        let pk = keys::instance_pk(key);
        for attempt in 1..=LOAD_ATTEMPTS {
            // One range holds HEAD, ITEM#*, LOG and PROD#* (see keys::STATE_RANGE_END).
            let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
                .value(":pk", s(pk.clone()))
                .value(":from", s(keys::HEAD_SK))
                .value(":to", s(keys::STATE_RANGE_END));
            let records = self.query(OP, q).await?;
            let mut state = InstanceState::default();
            let mut seen: Option<HeadVersion> = None;
            for item in &records {
                let sk = get_s(OP, item, SK)?;
                if sk == keys::HEAD_SK {
                    state.header = decode(OP, item)?;
                    seen = Some(head_version(OP, item)?);
                } else if sk.starts_with(keys::ITEM_PREFIX) {
                    let i: ItemState = decode(OP, item)?;
                    state.items.insert(i.item_id.clone(), i);
                } else if sk.starts_with(keys::PRODUCT_PREFIX) {
                    let p: ProductState = decode(OP, item)?;
                    state.products.insert(p.product_id.clone(), p);
                }
            }
            // A query is not isolated from a concurrent transaction: the state is a
            // snapshot only if no commit landed meanwhile (every commit bumps `rev`).
            if self.head(OP, &pk).await? == seen {
                return Ok(state);
            }
            tracing::debug!(
                pk,
                attempt,
                "a commit landed while loading the state; again"
            );
            backoff(attempt).await;
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: the state of {key} kept changing while being read"
        )))
    }

    async fn applied_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        Ok(self
            .head("applied_sequence", &keys::instance_pk(key))
            .await?
            .map_or(0, |h| h.applied))
    }

    async fn commit(&self, key: &InstanceKey, commit: Commit) -> StoreResult<()> {
        const OP: &str = "commit";
        if commit.record_count() > MAX_COMMIT_RECORDS {
            return Err(StoreError::Failed(format!(
                "{OP}: {} records exceed the limit of {MAX_COMMIT_RECORDS} per commit",
                commit.record_count()
            )));
        }
        let pk = keys::instance_pk(key);
        let encoded = Encoded::new(&commit)?;
        let schedule = serde_json::to_value(&commit.header.schedule).unwrap_or_default();
        for attempt in 1..=MAX_ATTEMPTS {
            let head = self.head(OP, &pk).await?;
            let stored = head.as_ref().map_or(0, |h| h.applied);
            // A new schedule applies from the scheduler's next run (see `schedule.rs`).
            let rescheduled = head
                .as_ref()
                .is_some_and(|h| h.schedule.as_ref() != Some(&schedule));
            if stored != commit.expected_applied {
                return Err(StoreError::Conflict(format!(
                    "state of {key} is at sequence {stored}, not {}",
                    commit.expected_applied
                )));
            }
            let mut actions = self.commit_actions(&pk, head, &encoded)?;
            actions.extend(self.event_writes(&pk, &encoded.events).await?);
            match self.transact(OP, actions).await? {
                Ok(()) => {
                    self.clear_backlog_marker(&pk, commit.header.applied_seq)
                        .await;
                    if rescheduled {
                        self.schedule_changed(key, pricing_core::time::Timestamp::now())
                            .await;
                    }
                    return Ok(());
                }
                // The header changed: read it again (most likely a Conflict now).
                Err(reasons) if failed_at(&reasons, 0) => {}
                Err(reasons) => {
                    tracing::debug!(
                        pk,
                        attempt,
                        failed = failed_count(&reasons),
                        "commit cancelled; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{OP}: {key} still contended after {MAX_ATTEMPTS} attempts"
        )))
    }
}

/// A commit's records as JSON; duplicate ids within the commit collapse (the last item or
/// product record wins, like successive upserts; the first event wins, like a replay).
struct Encoded {
    applied: u64,
    header: String,
    items: BTreeMap<String, String>,
    products: BTreeMap<String, String>,
    events: Vec<(String, String)>,
}

impl ProjectSales for DynamoStore {
    /// The project's instance items (`I#{id}` under the project) newest first, then each
    /// other instance's `PROD#` records: 1 + `limit` queries.
    async fn past_products(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> StoreResult<Vec<ProductState>> {
        const OP: &str = "past_products";
        let mut q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(keys::project_pk(&key.project())))
            .value(":prefix", s(keys::INSTANCE_PREFIX))
            .max(limit.saturating_add(1));
        q.forward = false;
        let instances = self.query(OP, q).await?;
        let mut out = Vec::new();
        let others = instances
            .iter()
            .filter_map(|item| get_s(OP, item, SK).ok())
            .filter_map(|sk| sk.strip_prefix(keys::INSTANCE_PREFIX).map(str::to_owned))
            .filter(|id| *id != key.instance_id.as_str())
            .take(limit);
        for id in others {
            let Ok(instance_id) = pricing_core::ids::InstanceId::parse(&id) else {
                continue;
            };
            let other = key.project().instance(instance_id);
            let q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
                .value(":pk", s(keys::instance_pk(&other)))
                .value(":prefix", s(keys::PRODUCT_PREFIX));
            for item in self.query(OP, q).await? {
                out.push(decode::<ProductState>(OP, &item)?);
            }
        }
        Ok(out)
    }
}

impl Encoded {
    fn new(c: &Commit) -> StoreResult<Self> {
        const OP: &str = "commit";
        let mut events: Vec<(String, String)> = Vec::with_capacity(c.events.len());
        let mut ids = HashSet::new();
        for e in &c.events {
            if ids.insert(e.id.as_str()) {
                events.push((e.id.clone(), encode::<Event>(OP, e)?));
            }
        }
        Ok(Encoded {
            applied: c.header.applied_seq,
            header: encode(OP, &c.header)?,
            items: c
                .items
                .iter()
                .map(|i| Ok((i.item_id.to_string(), encode(OP, i)?)))
                .collect::<StoreResult<_>>()?,
            products: c
                .products
                .iter()
                .map(|p| Ok((p.product_id.to_string(), encode(OP, p)?)))
                .collect::<StoreResult<_>>()?,
            events,
        })
    }
}

fn head_version(op: &str, item: &Item) -> StoreResult<HeadVersion> {
    Ok(HeadVersion {
        applied: get_n(op, item, APPLIED_SEQ)?,
        rev: get_n_opt(op, item, REV)?,
        schedule: item
            .get(RECORD)
            .and_then(|v| v.as_s().ok())
            .and_then(|r| serde_json::from_str::<HeadSchedule>(r).ok())
            .map(|h| h.schedule),
    })
}

impl DynamoStore {
    /// The stored header's version; `None` when the instance has no header.
    async fn head(&self, op: &str, pk: &str) -> StoreResult<Option<HeadVersion>> {
        self.get(op, pk.to_owned(), keys::HEAD_SK)
            .await?
            .map(|item| head_version(op, &item))
            .transpose()
    }

    fn commit_actions(
        &self,
        pk: &str,
        head: Option<HeadVersion>,
        c: &Encoded,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        const OP: &str = "commit";
        let new_rev = head.as_ref().and_then(|h| h.rev).unwrap_or(0) + 1;
        let put = |sk: String| {
            Put::builder()
                .table_name(self.table())
                .item(PK, s(pk))
                .item(SK, s(sk))
        };
        let action = |p: Put| TransactWriteItem::builder().put(p).build();
        let mut actions = Vec::with_capacity(3 + c.items.len() + c.products.len() + c.events.len());

        let header = put(keys::HEAD_SK.to_owned())
            .item(RECORD, s(c.header.clone()))
            .item(APPLIED_SEQ, n(c.applied))
            .item(REV, n(new_rev));
        let header = match head {
            None => header.condition_expression("attribute_not_exists(pk)"),
            Some(h) => {
                let header = header.expression_attribute_values(":expected", n(h.applied));
                match h.rev {
                    Some(rev) => header
                        .condition_expression("applied_seq = :expected AND rev = :rev")
                        .expression_attribute_values(":rev", n(rev)),
                    None => header.condition_expression(
                        "applied_seq = :expected AND attribute_not_exists(rev)",
                    ),
                }
            }
        };
        actions.push(action(built(OP, header.build())?));
        for (id, record) in &c.items {
            let p = put(keys::item_sk(id)).item(RECORD, s(record.clone()));
            actions.push(action(built(OP, p.build())?));
        }
        for (id, record) in &c.products {
            let p = put(keys::product_sk(id)).item(RECORD, s(record.clone()));
            actions.push(action(built(OP, p.build())?));
        }
        Ok(actions)
    }

    /// Removes the instance's backlog marker if the log holds nothing past `applied`. A
    /// hint only: when this fails, `instances_behind` clears the stale marker later.
    async fn clear_backlog_marker(&self, pk: &str, applied: u64) {
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
            .update_expression("REMOVE gsi1pk, gsi1sk")
            .condition_expression("attribute_exists(gsi1pk) AND last_seq <= :applied")
            .expression_attribute_values(":applied", n(applied))
            .send()
            .await;
        match result {
            Ok(_) => {}
            Err(e) if is_condition_failed(&e) => {}
            Err(e) => {
                let e = crate::error::store_error("commit: clear the backlog marker", e);
                tracing::warn!(pk, error = %e, "backlog marker not cleared; the sweep will");
            }
        }
    }
}
