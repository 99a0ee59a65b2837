//! EventStore, and the writing of events for the stores that produce them.
//!
//! Each event is `EVENT#{id}` (`record`, the `batch` it was written in and its index `idx`
//! there). Every write of events is one batch: an `EVLOG#{batch:020}` item listing the new
//! events' ids in order, and the counter `EVENTS` (`n` = batches written) advanced from
//! the value read, all in the writer's transaction (see [`DynamoStore::event_writes`]).
//! Creation order is batch order, then index order. One item per event (plus two per
//! batch) keeps a commit of `MAX_COMMIT_RECORDS` events within one transaction, and the
//! `EVENT#{id}` key makes a replayed event id a no-op.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{EventStore, StoreError, StoreResult};

use super::keys::{self, BATCH, COUNT, IDS, IDX, PK, RECORD, SK};
use super::{DynamoStore, Query, built, decode, encode, get_n, get_n_opt, get_s, n, s};
use crate::error::corrupt;

impl EventStore for DynamoStore {
    async fn list_events(
        &self,
        key: &InstanceKey,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        const OP: &str = "list_events";
        let pk = keys::instance_pk(key);
        // Where to start: the batch of the `after` event, past its index.
        let (from_batch, skip_through) = match after {
            None => (0, None),
            Some(id) => {
                let item = self
                    .get(OP, pk.clone(), &keys::event_sk(id))
                    .await?
                    // An unknown cursor is an error, not an empty page: a consumer that
                    // lost its place must notice.
                    .ok_or(StoreError::NotFound)?;
                (get_n(OP, &item, BATCH)?, Some(get_n(OP, &item, IDX)?))
            }
        };
        if limit == 0 {
            return Ok(Vec::new());
        }

        // Ids in order, from batches (each holds at least one id, so `limit` batches after
        // the first do).
        let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
            .value(":pk", s(pk.clone()))
            .value(":from", s(keys::event_batch_sk(from_batch)))
            .value(":to", s(keys::event_batch_sk(u64::MAX)))
            .max(limit.saturating_add(1));
        let mut ids: Vec<String> = Vec::new();
        'batches: for batch in self.query(OP, q).await? {
            let number = get_s(OP, &batch, SK)?
                .strip_prefix(keys::EVENT_BATCH_PREFIX)
                .and_then(|r| r.parse::<u64>().ok())
                .ok_or_else(|| corrupt(OP, "an event batch key is not EVLOG#{number}"))?;
            let listed: Vec<String> = serde_json::from_str(get_s(OP, &batch, IDS)?)
                .map_err(|e| corrupt(OP, format!("event batch {number}: {e}")))?;
            for (idx, id) in listed.into_iter().enumerate() {
                if number == from_batch && skip_through.is_some_and(|s| idx as u64 <= s) {
                    continue;
                }
                ids.push(id);
                if ids.len() == limit {
                    break 'batches;
                }
            }
        }

        let wanted = ids
            .iter()
            .map(|id| (pk.clone(), keys::event_sk(id)))
            .collect();
        let mut by_id: HashMap<String, Event> = HashMap::with_capacity(ids.len());
        for item in self.batch_get(OP, wanted).await? {
            let event: Event = decode(OP, &item)?;
            by_id.insert(event.id.clone(), event);
        }
        ids.iter()
            .map(|id| {
                by_id
                    .remove(id)
                    .ok_or_else(|| corrupt(OP, format!("event {id} is listed but not stored")))
            })
            .collect()
    }
}

impl DynamoStore {
    /// The transaction actions that store `events` (id, JSON record; distinct ids) of the
    /// instance partition `pk` as one batch: events whose id is stored already are skipped
    /// (none left: no actions). Conditions: each event absent, the batch absent, the
    /// counter unchanged since read here. A writer whose transaction is cancelled on one
    /// of them calls this again (another writer stored events meanwhile). At most
    /// `events.len() + 2` actions.
    pub(crate) async fn event_writes(
        &self,
        pk: &str,
        events: &[(String, String)],
    ) -> StoreResult<Vec<TransactWriteItem>> {
        const OP: &str = "write events";
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut wanted: Vec<(String, String)> = events
            .iter()
            .map(|(id, _)| (pk.to_owned(), keys::event_sk(id)))
            .collect();
        wanted.push((pk.to_owned(), keys::EVENT_COUNTER_SK.to_owned()));
        let mut stored = HashSet::new();
        let mut count = 0;
        for item in self.batch_get(OP, wanted).await? {
            let sk = get_s(OP, &item, SK)?;
            if sk == keys::EVENT_COUNTER_SK {
                count = get_n_opt(OP, &item, COUNT)?.unwrap_or(0);
            } else {
                stored.insert(sk.strip_prefix("EVENT#").unwrap_or(sk).to_owned());
            }
        }
        let fresh: Vec<&(String, String)> = events
            .iter()
            .filter(|(id, _)| !stored.contains(id))
            .collect();
        if fresh.is_empty() {
            return Ok(Vec::new());
        }

        let batch = count + 1;
        let put = |sk: String| {
            Put::builder()
                .table_name(self.table())
                .item(PK, s(pk))
                .item(SK, s(sk))
                .condition_expression("attribute_not_exists(pk)")
        };
        let mut actions = Vec::with_capacity(fresh.len() + 2);
        for (idx, (id, record)) in fresh.iter().enumerate() {
            let p = put(keys::event_sk(id))
                .item(RECORD, s(record.clone()))
                .item(BATCH, n(batch))
                .item(IDX, n(idx as u64));
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, p.build())?)
                    .build(),
            );
        }
        let ids: Vec<&str> = fresh.iter().map(|(id, _)| id.as_str()).collect();
        let p = put(keys::event_batch_sk(batch)).item(IDS, s(encode(OP, &ids)?));
        actions.push(
            TransactWriteItem::builder()
                .put(built(OP, p.build())?)
                .build(),
        );
        let counter = Update::builder()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::EVENT_COUNTER_SK))
            .update_expression("SET n = :batch")
            .expression_attribute_values(":batch", n(batch));
        let counter = if count == 0 {
            counter.condition_expression("attribute_not_exists(n)")
        } else {
            counter
                .condition_expression("n = :count")
                .expression_attribute_values(":count", n(count))
        };
        actions.push(
            TransactWriteItem::builder()
                .update(built(OP, counter.build())?)
                .build(),
        );
        Ok(actions)
    }
}
