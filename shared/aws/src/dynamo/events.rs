//! EventStore, and the writing of events for the stores that produce them.
//!
//! Each event is `EVENT#{id}` (`record`, the `batch` it was written in and its index `idx`
//! there). Every write of events is one batch: an `EVLOG#{batch:020}` item listing the new
//! events' ids in order, and the counter `EVENTS` (`n` = batches written) advanced from
//! the value read, all in the writer's transaction (see [`DynamoStore::event_writes`]).
//! Creation order is batch order, then index order. One item per event (plus two per
//! batch) keeps a commit of `MAX_COMMIT_RECORDS` events within one transaction, and the
//! `EVENT#{id}` key makes a replayed event id a no-op.
//!
//! The outbox: `EVENTS` also holds the size of the latest batch (`last_len`) and the
//! dispatch mark (`disp_batch`, `disp_idx`: the position of the last dispatched event).
//! Every event write sets the sparse index entry `gsi1pk = OUTBOX#{shard}`,
//! `gsi1sk = I#{pid}/{iid}` on `EVENTS` in the same update that advances `n`; the mark
//! moves forward only (conditioned on the stored mark) and removes the entry in the same
//! update when it reaches the last event of batch `n`, conditioned on `n` and `last_len`:
//! one item holds the counter, the mark and the index entry, so a batch written
//! concurrently either lands first (the condition fails and the entry stays) or after (it
//! sets the entry again).

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use pricing_core::ids::InstanceKey;
use pricing_core::model::Event;
use pricing_core::ports::{EventStore, MAX_COMMIT_RECORDS, StoreError, StoreResult};

use super::keys::{
    self, BATCH, COUNT, DISP_BATCH, DISP_IDX, GSI1PK, IDS, IDX, LAST_LEN, OUTBOX_SHARDS, PK,
    RECORD, SK,
};
use super::{
    DynamoStore, Item, MAX_ATTEMPTS, Query, backoff, built, condition_held, decode, encode,
    failed_count, get_n, get_n_opt, get_s, is_condition_failed, n, s,
};
use crate::error::{corrupt, store_error};

/// A position in an instance's event order: (batch, index in the batch).
type Position = (u64, u64);

/// The outbox state of an instance, from its `EVENTS` item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Outbox {
    /// Batches written.
    batches: u64,
    /// Events in the latest batch (0 when unknown).
    last_len: u64,
    /// The last dispatched event.
    mark: Option<Position>,
}

impl Outbox {
    fn of(op: &str, item: &Item) -> StoreResult<Self> {
        let mark = match (
            get_n_opt(op, item, DISP_BATCH)?,
            get_n_opt(op, item, DISP_IDX)?,
        ) {
            (Some(b), Some(i)) => Some((b, i)),
            _ => None,
        };
        Ok(Outbox {
            batches: get_n_opt(op, item, COUNT)?.unwrap_or(0),
            last_len: get_n_opt(op, item, LAST_LEN)?.unwrap_or(0),
            mark,
        })
    }

    /// The position of the newest event, if any.
    fn newest(&self) -> Option<Position> {
        (self.batches > 0 && self.last_len > 0).then(|| (self.batches, self.last_len - 1))
    }

    /// Whether every event written is dispatched.
    fn caught_up(&self) -> bool {
        self.batches == 0 || (self.newest().is_some() && self.mark == self.newest())
    }
}

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
        self.events_from(OP, &pk, from_batch, skip_through, limit)
            .await
    }

    async fn append_events(&self, key: &InstanceKey, events: &[Event]) -> StoreResult<()> {
        const OP: &str = "append_events";
        if events.len() > MAX_COMMIT_RECORDS {
            return Err(StoreError::Failed(format!(
                "{OP}: {} events exceed the limit of {MAX_COMMIT_RECORDS} per call",
                events.len()
            )));
        }
        let pk = keys::instance_pk(key);
        let mut seen = HashSet::new();
        let mut records = Vec::with_capacity(events.len());
        for e in events {
            if seen.insert(e.id.as_str()) {
                records.push((e.id.clone(), encode(OP, e)?));
            }
        }
        self.write_event_records(OP, &pk, &records).await
    }

    async fn undispatched_events(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        const OP: &str = "undispatched_events";
        let pk = keys::instance_pk(key);
        let outbox = match self.get(OP, pk.clone(), keys::EVENT_COUNTER_SK).await? {
            Some(item) => Outbox::of(OP, &item)?,
            None => return Ok(Vec::new()),
        };
        if outbox.caught_up() || limit == 0 {
            return Ok(Vec::new());
        }
        let (from_batch, skip_through) = match outbox.mark {
            Some((b, i)) => (b, Some(i)),
            None => (0, None),
        };
        self.events_from(OP, &pk, from_batch, skip_through, limit)
            .await
    }

    async fn mark_dispatched(&self, key: &InstanceKey, through: &str) -> StoreResult<()> {
        const OP: &str = "mark_dispatched";
        let pk = keys::instance_pk(key);
        let event = self
            .get_projected(OP, pk.clone(), &keys::event_sk(through), &[BATCH, IDX])
            .await?
            .ok_or(StoreError::NotFound)?;
        let to: Position = (get_n(OP, &event, BATCH)?, get_n(OP, &event, IDX)?);
        let outbox = match self.get(OP, pk.clone(), keys::EVENT_COUNTER_SK).await? {
            Some(item) => Outbox::of(OP, &item)?,
            None => return Err(corrupt(OP, format!("event {through} has no event counter"))),
        };
        if outbox.mark.is_some_and(|m| m >= to) {
            return Ok(());
        }
        // The newest event: move the mark and leave the outbox index, unless a batch
        // lands meanwhile (then only move the mark).
        if outbox.newest() == Some(to) && self.move_mark(&pk, to, true).await? {
            return Ok(());
        }
        // A failed condition here means the mark is already at or past `to`.
        self.move_mark(&pk, to, false).await?;
        Ok(())
    }

    async fn instances_with_undispatched_events(
        &self,
        limit: usize,
    ) -> StoreResult<Vec<InstanceKey>> {
        self.sharded_candidates(
            "instances_with_undispatched_events",
            OUTBOX_SHARDS,
            keys::outbox_shard_pk,
            limit,
            |candidates| async move { self.check_outbox_candidates(&candidates).await },
        )
        .await
    }
}

impl DynamoStore {
    /// Events after position (`from_batch`, `skip_through`), in creation order, at most
    /// `limit`.
    async fn events_from(
        &self,
        op: &str,
        pk: &str,
        from_batch: u64,
        skip_through: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        if limit == 0 {
            return Ok(Vec::new());
        }

        // Ids in order, from batches (each holds at least one id, so `limit` batches after
        // the first do).
        let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
            .value(":pk", s(pk.to_owned()))
            .value(":from", s(keys::event_batch_sk(from_batch)))
            .value(":to", s(keys::event_batch_sk(u64::MAX)))
            .max(limit.saturating_add(1));
        let mut ids: Vec<String> = Vec::new();
        // Ids of batches past their retention: DynamoDB may have deleted some of their
        // events already (TTL deletes items one by one, in no order).
        let mut expired: HashSet<String> = HashSet::new();
        let now_secs = pricing_core::time::Timestamp::now().millis() / 1000;
        'batches: for batch in self.query(op, q).await? {
            let number = get_s(op, &batch, SK)?
                .strip_prefix(keys::EVENT_BATCH_PREFIX)
                .and_then(|r| r.parse::<u64>().ok())
                .ok_or_else(|| corrupt(op, "an event batch key is not EVLOG#{number}"))?;
            let listed: Vec<String> = serde_json::from_str(get_s(op, &batch, IDS)?)
                .map_err(|e| corrupt(op, format!("event batch {number}: {e}")))?;
            let past_retention = batch
                .get(super::TTL_ATTRIBUTE)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|t| t <= now_secs);
            for (idx, id) in listed.into_iter().enumerate() {
                if number == from_batch && skip_through.is_some_and(|s| idx as u64 <= s) {
                    continue;
                }
                if past_retention {
                    expired.insert(id.clone());
                }
                ids.push(id);
                if ids.len() == limit {
                    break 'batches;
                }
            }
        }

        let wanted = ids
            .iter()
            .map(|id| (pk.to_owned(), keys::event_sk(id)))
            .collect();
        let mut by_id: HashMap<String, Event> = HashMap::with_capacity(ids.len());
        for item in self.batch_get(op, wanted).await? {
            let event: Event = decode(op, &item)?;
            by_id.insert(event.id.clone(), event);
        }
        // An event past its retention may be gone (its batch is listed until TTL deletes
        // it too): skipped. Any other missing event is damage.
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            match by_id.remove(id) {
                Some(event) => out.push(event),
                None if expired.contains(id) => {}
                None => return Err(corrupt(op, format!("event {id} is listed but not stored"))),
            }
        }
        Ok(out)
    }

    /// Moves the dispatch mark forward to `to`; with `leave_index`, also removes the
    /// outbox index entry, conditioned on `to` being the newest event. `false` when a
    /// condition failed (nothing written).
    async fn move_mark(&self, pk: &str, to: Position, leave_index: bool) -> StoreResult<bool> {
        const OP: &str = "mark_dispatched";
        let forward = "(attribute_not_exists(disp_batch) OR disp_batch < :b \
                       OR (disp_batch = :b AND disp_idx < :i))";
        let mut req = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::EVENT_COUNTER_SK))
            .expression_attribute_values(":b", n(to.0))
            .expression_attribute_values(":i", n(to.1));
        req = if leave_index {
            req.update_expression("SET disp_batch = :b, disp_idx = :i REMOVE gsi1pk, gsi1sk")
                .condition_expression(format!("{forward} AND n = :b AND last_len = :len"))
                .expression_attribute_values(":len", n(to.1 + 1))
        } else {
            req.update_expression("SET disp_batch = :b, disp_idx = :i")
                .condition_expression(format!("attribute_exists(n) AND {forward}"))
        };
        condition_held(OP, req.send().await)
    }

    /// The candidates of the outbox index that have undispatched events, in index
    /// order (checked against consistent reads); clears stale entries of the others.
    async fn check_outbox_candidates(&self, candidates: &[Item]) -> StoreResult<Vec<InstanceKey>> {
        const OP: &str = "instances_with_undispatched_events";
        let mut pks = Vec::with_capacity(candidates.len());
        for c in candidates {
            let pk = get_s(OP, c, PK)?;
            match keys::parse_instance_pk(pk) {
                Some(key) => pks.push((pk.to_owned(), key)),
                None => tracing::warn!(pk, "outbox entry on an unexpected item; skipped"),
            }
        }
        if pks.is_empty() {
            return Ok(Vec::new());
        }
        let wanted = pks
            .iter()
            .map(|(pk, _)| (pk.clone(), keys::EVENT_COUNTER_SK.to_owned()))
            .collect();
        let mut outboxes: HashMap<String, (Outbox, bool)> = HashMap::new();
        for item in self
            .batch_get_projected(
                OP,
                wanted,
                &[PK, COUNT, LAST_LEN, DISP_BATCH, DISP_IDX, GSI1PK],
            )
            .await?
        {
            let pk = get_s(OP, &item, PK)?.to_owned();
            let indexed = item.contains_key(GSI1PK);
            outboxes.insert(pk, (Outbox::of(OP, &item)?, indexed));
        }
        let mut found = Vec::new();
        for (pk, key) in pks {
            match outboxes.get(&pk) {
                Some((outbox, _)) if !outbox.caught_up() => found.push(key),
                Some((outbox, true)) => self.clear_stale_outbox_entry(&pk, outbox).await?,
                // Gone from the index meanwhile (the index lags behind the table).
                _ => {}
            }
        }
        Ok(found)
    }

    /// Removes an index entry left on a caught-up outbox, conditioned on what was read.
    async fn clear_stale_outbox_entry(&self, pk: &str, outbox: &Outbox) -> StoreResult<()> {
        const OP: &str = "instances_with_undispatched_events: clear a stale entry";
        let Some((b, i)) = outbox.mark else {
            return Ok(());
        };
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::EVENT_COUNTER_SK))
            .update_expression("REMOVE gsi1pk, gsi1sk")
            .condition_expression(
                "attribute_exists(gsi1pk) AND n = :n AND disp_batch = :b AND disp_idx = :i",
            )
            .expression_attribute_values(":n", n(outbox.batches))
            .expression_attribute_values(":b", n(b))
            .expression_attribute_values(":i", n(i))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Events written or the entry cleared meanwhile.
            Err(e) if is_condition_failed(&e) => Ok(()),
            Err(e) => Err(store_error(OP, e)),
        }
    }

    /// The transaction actions that store `events` (id, JSON record; distinct ids) of the
    /// instance partition `pk` as one batch: events whose id is stored already are skipped
    /// (none left: no actions). Conditions: each event absent, the batch absent, the
    /// counter unchanged since read here. A writer whose transaction is cancelled on one
    /// of them calls this again (another writer stored events meanwhile). At most
    /// `events.len() + 2` actions. The counter update also records the batch's size and
    /// puts the instance in the outbox index (it has undispatched events now).
    /// Stores encoded events `(id, record)` of the instance `pk` in one transaction, after
    /// those stored before (by id: the ones already stored are skipped, so a retry or a
    /// replay writes each once). At most [`MAX_COMMIT_RECORDS`] events and what one
    /// transaction's 4 MB hold (see `prices::event_chunks`).
    pub(crate) async fn write_event_records(
        &self,
        op: &str,
        pk: &str,
        records: &[(String, String)],
    ) -> StoreResult<()> {
        for attempt in 1..=MAX_ATTEMPTS {
            let actions = self.event_writes(pk, records).await?;
            if actions.is_empty() {
                return Ok(());
            }
            match self.transact(op, actions).await? {
                Ok(()) => return Ok(()),
                Err(reasons) => {
                    // Another writer stored events (or these ones) meanwhile: plan again.
                    tracing::debug!(
                        pk,
                        attempt,
                        failed = failed_count(&reasons),
                        "{op}: event write cancelled; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "{op}: {pk} still contended after {MAX_ATTEMPTS} attempts"
        )))
    }

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
        // Events and their batch expire together, counted from now (their creation).
        let expiry = self.expiry(
            pricing_core::retention::Class::Events,
            pricing_core::time::Timestamp::now(),
        );
        let put = |sk: String| {
            let p = Put::builder()
                .table_name(self.table())
                .item(PK, s(pk))
                .item(SK, s(sk))
                .condition_expression("attribute_not_exists(pk)");
            match &expiry {
                Some((name, at)) => p.item(*name, at.clone()),
                None => p,
            }
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
            .update_expression(
                "SET n = :batch, last_len = :len, gsi1pk = :outbox, gsi1sk = :instance",
            )
            .expression_attribute_values(":batch", n(batch))
            .expression_attribute_values(":len", n(fresh.len() as u64))
            .expression_attribute_values(":outbox", s(keys::outbox_pk(pk)))
            .expression_attribute_values(":instance", s(pk));
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
