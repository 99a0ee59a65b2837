//! PriceStore and PriceMatchStore on the single table.
//!
//! Keys in the instance partition `I#{pid}/{iid}` (all after `~`, outside the state range
//! that `load_state` reads):
//!
//! | sk | what |
//! |---|---|
//! | `~P#HEAD` | latest calculation pointer: `seq`, `calc`, `parts` |
//! | `~P#C#{calculationId}` | calculation marker: `seq`, `parts`, `done` (history written), the calculation it replaced (`replaced`, `replacedParts`) |
//! | `~P#S#{calculationId}#{part:04}` | the calculation's prices, up to ~350 KB per item |
//! | `~P#H#{itemId}#{seq:020}` | one history entry of an item |
//!
//! A part (`fmt` 2) holds each price compactly (`StoredPriceRef`: about 40 bytes for an
//! unchanged price) and, for a price that goes into the history (calculated and changed),
//! its explanation (`x`), so a crashed save can still write the history from the parts.
//! Only changed prices get a history entry: an unchanged price costs its few bytes in the
//! parts and nothing else. Parts written before (no `fmt`) hold whole `ItemPrice`s. Once a
//! calculation's history is written, the parts of the calculation it replaced are deleted
//! (when that one's history was done): only the latest calculation keeps a price list.
//! | `~M#SET` | the price match rule set (`record`, `version`) |
//!
//! `save_calculation` writes the price parts first (keyed by calculation id: a loser of a
//! race leaves only unreferenced parts), then one transaction: the pointer (conditional on
//! the previous sequence), the marker and the `prices.updated` events. History entries
//! follow, then the marker's `done` flag, then the replaced calculation's retirement (its
//! marker's TTL, its parts deleted). `has_calculation` and a replayed save of a stored
//! calculation whose history is not done finish it from the stored parts, the
//! retirement included (the marker names the calculation it replaced), so a crash loses
//! nothing and leaks nothing.

use aws_sdk_dynamodb::types::{DeleteRequest, Put, PutRequest, TransactWriteItem, WriteRequest};
use pricing_core::ids::{InstanceKey, ItemId};
use pricing_core::model::{
    Event, Page, PageRequest, PriceCalculation, PriceHistoryEntry, StoredPrice, StoredPriceRef,
    is_history_entry,
};
use pricing_core::money::Money;
use pricing_core::ports::{
    LatestPricesPage, MatchSet, PriceMatchStore, PriceStore, SaveEvents, StoreError, StoreResult,
};
use pricing_core::pricing::{Explanation, ItemPrice, PriceMatch};
use serde::{Deserialize, Serialize};

use super::keys::{self, PK, RECORD, SK};
use super::{DynamoStore, Item, Query, backoff, built, decode, encode, get_n, get_s, n, s};
use crate::error::{corrupt, store_error};

const HEAD: &str = "~P#HEAD";
/// A marker's attributes naming the calculation it replaced and that one's part count.
const REPLACED: &str = "replaced";
const REPLACED_PARTS: &str = "replacedParts";
const MATCHES: &str = "~M#SET";
/// Bytes of prices per stored part (an item holds 400 KB with its keys and attributes).
const PART_BYTES: usize = 350_000;
/// The part format written now (`fmt`): compact prices, explanations of history entries.
const PART_FORMAT: u64 = 2;
/// Items per BatchWriteItem call (the API's limit).
const BATCH_WRITE: usize = 25;

/// Events of a calculation per transaction: DynamoDB takes 100 actions (each event is a
/// Put, beside its batch record, the event counter, and the calculation's pointer and
/// marker) and 4 MB per transaction; a `prices.updated` part of 1,000 prices is ~75 KB, so
/// a calculation of more than ~50,000 prices takes several.
const EVENTS_PER_TRANSACTION: usize = 90;
const EVENT_BYTES_PER_TRANSACTION: usize = 3 * 1024 * 1024;
/// Attribute names and keys of an event item beside its id and record, at most.
const EVENT_ITEM_OVERHEAD: usize = 200;

/// The events `(id, record)` in order.
fn encode_events(op: &str, events: SaveEvents<'_>) -> StoreResult<Vec<(String, String)>> {
    events
        .iter()
        .map(|e| Ok((e.id.clone(), encode(op, &*e)?)))
        .collect()
}

/// `records` cut into runs that one transaction holds, in order (one empty run when there
/// are none).
fn event_chunks(records: &[(String, String)]) -> Vec<&[(String, String)]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, (id, record)) in records.iter().enumerate() {
        let size = id.len() + record.len() + EVENT_ITEM_OVERHEAD;
        if i > start
            && (i - start >= EVENTS_PER_TRANSACTION || bytes + size > EVENT_BYTES_PER_TRANSACTION)
        {
            chunks.push(&records[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    chunks.push(&records[start..]);
    chunks
}

fn marker_sk(calculation_id: &str) -> String {
    format!("~P#C#{calculation_id}")
}
fn part_sk(calculation_id: &str, part: usize) -> String {
    format!("~P#S#{calculation_id}#{part:04}")
}
fn history_prefix(item: &ItemId) -> String {
    format!("~P#H#{item}#")
}
fn history_sk(item: &ItemId, seq: u64) -> String {
    format!("~P#H#{item}#{seq:020}")
}

/// The calculation without its prices (stored in the marker and read with the parts).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CalcMeta {
    calculation_id: String,
    trigger: pricing_core::pricing::Trigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metadata: Option<serde_json::Value>,
    calculated_at: pricing_core::time::Timestamp,
    sequence: u64,
}

/// A price in a part (format 2): compact, with the explanation of a history entry.
#[derive(Serialize)]
struct PartPriceRef<'a> {
    #[serde(flatten)]
    price: StoredPriceRef<'a>,
    #[serde(rename = "x", skip_serializing_if = "Option::is_none")]
    explanation: Option<&'a Explanation>,
}

/// A price in a part (format 2) read as its item id and price only.
#[derive(Deserialize)]
struct ListedPrice {
    i: ItemId,
    p: Money,
}

#[derive(Deserialize)]
struct PartPrice {
    #[serde(flatten)]
    price: StoredPrice,
    #[serde(rename = "x", default)]
    explanation: Option<Explanation>,
}

impl PartPrice {
    fn into_item_price(self) -> ItemPrice {
        let mut price = self.price.into_item_price();
        if let Some(explanation) = self.explanation {
            price.explanation = explanation;
        }
        price
    }
}

/// The prices as part records (JSON arrays) of at most [`PART_BYTES`] each.
/// With the number of prices in each part.
fn encode_parts(op: &str, prices: &[ItemPrice]) -> StoreResult<Vec<(String, usize)>> {
    let mut parts = Vec::new();
    let mut current = String::from("[");
    let mut count = 0;
    for p in prices {
        let json = encode(
            op,
            &PartPriceRef {
                price: StoredPriceRef::of(p),
                explanation: is_history_entry(p).then_some(&p.explanation),
            },
        )?;
        if current.len() > 1 && current.len() + json.len() + 1 > PART_BYTES {
            current.push(']');
            parts.push((std::mem::replace(&mut current, String::from("[")), count));
            count = 0;
        }
        if current.len() > 1 {
            current.push(',');
        }
        current.push_str(&json);
        count += 1;
    }
    if current.len() > 1 {
        current.push(']');
        parts.push((current, count));
    }
    Ok(parts)
}

/// The head's `counts`: the number of prices in each part, comma-separated (heads written
/// before it have none, and a page of their prices reads them all).
fn part_counts(op: &str, head: &Item) -> StoreResult<Option<Vec<usize>>> {
    let Some(counts) = head.get("counts") else {
        return Ok(None);
    };
    let counts = counts
        .as_s()
        .map_err(|_| corrupt(op, "attribute counts is not a string"))?;
    if counts.is_empty() {
        return Ok(Some(Vec::new()));
    }
    counts
        .split(',')
        .map(|c| {
            c.parse()
                .map_err(|e| corrupt(op, format!("attribute counts = {counts:?}: {e}")))
        })
        .collect::<StoreResult<_>>()
        .map(Some)
}

impl DynamoStore {
    /// Writes items with BatchWriteItem (chunks of 25, unprocessed items retried).
    async fn batch_put(&self, op: &str, items: Vec<Item>) -> StoreResult<()> {
        let mut requests = Vec::with_capacity(items.len());
        for item in items {
            let put = built(op, PutRequest::builder().set_item(Some(item)).build())?;
            requests.push(WriteRequest::builder().put_request(put).build());
        }
        self.batch_write(op, requests).await
    }

    /// Runs write requests with BatchWriteItem (chunks of 25, unprocessed ones retried).
    async fn batch_write(&self, op: &str, requests: Vec<WriteRequest>) -> StoreResult<()> {
        for chunk in requests.chunks(BATCH_WRITE) {
            let mut pending: Vec<WriteRequest> = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                let out = self
                    .client()
                    .batch_write_item()
                    .request_items(self.table(), std::mem::take(&mut pending))
                    .send()
                    .await
                    .map_err(|e| store_error(op, e))?;
                if let Some(mut rest) = out.unprocessed_items {
                    pending = rest.remove(self.table()).unwrap_or_default();
                }
                if !pending.is_empty() {
                    attempt += 1;
                    if attempt > 40 {
                        return Err(StoreError::Unavailable(format!(
                            "{op}: BatchWriteItem kept leaving items unprocessed"
                        )));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Ok(())
    }

    fn item(pk: &str, sk: String) -> Item {
        Item::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
    }

    /// Writes the history entries of a stored calculation, then marks it done.
    async fn write_history(
        &self,
        pk: &str,
        meta: &CalcMeta,
        prices: &[ItemPrice],
    ) -> StoreResult<()> {
        const OP: &str = "save_calculation history";
        let mut items = Vec::new();
        for p in prices.iter().filter(|p| is_history_entry(p)) {
            let entry = PriceHistoryEntry {
                sequence: meta.sequence,
                calculation_id: meta.calculation_id.clone(),
                trigger: meta.trigger,
                calculated_at: meta.calculated_at,
                price: p.clone(),
            };
            let mut item = Self::item(pk, history_sk(&p.item_id, meta.sequence));
            item.insert(RECORD.to_owned(), s(encode(OP, &entry)?));
            items.push(item);
        }
        self.batch_put(OP, items).await?;
        // Each of these items' previous entry is no longer its latest: its retention starts.
        let changed: Vec<ItemId> = prices
            .iter()
            .filter(|p| is_history_entry(p))
            .map(|p| p.item_id.clone())
            .collect();
        self.expire_replaced_entries(pk, meta.sequence, changed)
            .await?;
        self.client()
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(marker_sk(&meta.calculation_id)))
            .update_expression("SET done = :t")
            .expression_attribute_values(":t", aws_sdk_dynamodb::types::AttributeValue::Bool(true))
            .send()
            .await
            .map_err(|e| store_error(OP, e))?;
        Ok(())
    }

    /// Sets the TTL (`expires_at`) of the marker of a calculation that is no longer the
    /// latest: the calculation retention from now (issue 12, item 3). The latest
    /// calculation never carries one. A failure is logged, not returned: the new
    /// calculation is stored, and the old marker is then kept (a few hundred bytes).
    async fn expire_calculation(&self, pk: &str, calculation_id: &str) {
        const OP: &str = "save_calculation (replaced marker)";
        let Some((name, at)) = self.expiry(
            pricing_core::retention::Class::Calculations,
            pricing_core::time::Timestamp::now(),
        ) else {
            return;
        };
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(marker_sk(calculation_id)))
            .update_expression(format!("SET {name} = :ttl"))
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":ttl", at)
            .send()
            .await;
        match result {
            Ok(_) => {}
            Err(e) if super::is_condition_failed(&e) => {}
            Err(e) => {
                let e = store_error(OP, e);
                tracing::warn!(pk, calculation_id, error = %e, "a replaced calculation keeps no TTL");
            }
        }
    }

    /// Sets the TTL of the entry before sequence `seq` of each item in `items` (an item's
    /// latest entry never has one: it explains the item's current price): the price
    /// history horizon from that entry's own time. One Query (Limit 1) and, for an entry
    /// without a TTL, one UpdateItem (about 1 KB) per item, 16 at a time.
    async fn expire_replaced_entries(
        &self,
        pk: &str,
        seq: u64,
        items: Vec<ItemId>,
    ) -> StoreResult<()> {
        const OP: &str = "save_calculation (replaced history entries)";
        if seq <= 1
            || items.is_empty()
            || self
                .retention()
                .of(pricing_core::retention::Class::PriceHistory)
                .is_none()
        {
            return Ok(());
        }
        let mut pending = items.into_iter();
        loop {
            let mut tasks = tokio::task::JoinSet::new();
            for item in pending.by_ref().take(16) {
                let (store, pk) = (self.clone(), pk.to_owned());
                tasks.spawn(async move { store.expire_replaced_entry(&pk, seq, &item).await });
            }
            if tasks.is_empty() {
                return Ok(());
            }
            while let Some(done) = tasks.join_next().await {
                done.map_err(|e| StoreError::Failed(format!("{OP}: {e}")))??;
            }
        }
    }

    async fn expire_replaced_entry(&self, pk: &str, seq: u64, item: &ItemId) -> StoreResult<()> {
        const OP: &str = "save_calculation (replaced history entry)";
        let mut q = Query::new("pk = :pk AND sk BETWEEN :lo AND :hi")
            .value(":pk", s(pk.to_owned()))
            .value(":lo", s(history_prefix(item)))
            .value(":hi", s(history_sk(item, seq - 1)))
            .max(1);
        q.forward = false;
        let Some(previous) = self.query(OP, q).await?.into_iter().next() else {
            return Ok(());
        };
        if previous.contains_key(super::TTL_ATTRIBUTE) {
            return Ok(());
        }
        let entry: PriceHistoryEntry = decode(OP, &previous)?;
        let Some((name, at)) = self.expiry(
            pricing_core::retention::Class::PriceHistory,
            entry.calculated_at,
        ) else {
            return Ok(());
        };
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(get_s(OP, &previous, SK)?))
            .update_expression(format!("SET {name} = :ttl"))
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":ttl", at)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if super::is_condition_failed(&e) => Ok(()),
            Err(e) => Err(store_error(OP, e)),
        }
    }

    /// Finishes the save of the calculation whose marker is `marker` when it was cut off
    /// after its transaction (step 2: pointer, marker, first events) and before its done
    /// flag (a crash, the function's timeout, a history write that failed): the events
    /// the transaction could not hold (made again from the stored prices, unless `listed`;
    /// those stored are skipped by id), the history, the done flag, and the retirement of
    /// the calculation it replaced, which its marker names (markers written before
    /// 2026-12-01 do not: their predecessor is left as it is). A marker already done is
    /// left alone.
    async fn finish_interrupted(
        &self,
        key: &InstanceKey,
        pk: &str,
        marker: &Item,
        listed: Option<&[Event]>,
    ) -> StoreResult<()> {
        const OP: &str = "save_calculation (finish)";
        if matches!(
            marker.get("done"),
            Some(aws_sdk_dynamodb::types::AttributeValue::Bool(true))
        ) {
            return Ok(());
        }
        let stored: CalcMeta = decode(OP, marker)?;
        let prices = self
            .read_parts(OP, pk, &stored.calculation_id, get_n(OP, marker, "parts")?)
            .await?;
        let calculation = PriceCalculation {
            calculation_id: stored.calculation_id.clone(),
            trigger: stored.trigger,
            metadata: stored.metadata.clone(),
            calculated_at: stored.calculated_at,
            sequence: stored.sequence,
            prices,
        };
        let events = match listed {
            Some(events) => SaveEvents::Listed(events),
            None => SaveEvents::PricesUpdated {
                key,
                calculation: &calculation,
            },
        };
        let records = encode_events(OP, events)?;
        for chunk in event_chunks(&records) {
            self.write_event_records(OP, pk, chunk).await?;
        }
        self.write_history(pk, &stored, &calculation.prices).await?;
        let replaced = match marker.get(REPLACED) {
            Some(_) => Some((
                get_s(OP, marker, REPLACED)?.to_owned(),
                get_n(OP, marker, REPLACED_PARTS)?,
            )),
            None => None,
        };
        self.retire(pk, replaced).await
    }

    /// A calculation that is no longer the latest: its marker's retention starts (the
    /// latest keeps none), and its price list is deleted unless a replay still needs it.
    async fn retire(&self, pk: &str, replaced: Option<(String, u64)>) -> StoreResult<()> {
        if let Some((replaced, parts)) = replaced {
            self.expire_calculation(pk, &replaced).await;
            self.drop_parts(pk, &replaced, parts).await?;
        }
        Ok(())
    }

    /// Deletes the parts of a calculation that is no longer the latest, once its history
    /// is written (a replay of it finishes its history from them otherwise).
    async fn drop_parts(&self, pk: &str, calculation_id: &str, parts: u64) -> StoreResult<()> {
        const OP: &str = "save_calculation (replaced parts)";
        let Some(marker) = self
            .get(OP, pk.to_owned(), &marker_sk(calculation_id))
            .await?
        else {
            return Ok(());
        };
        if !matches!(
            marker.get("done"),
            Some(aws_sdk_dynamodb::types::AttributeValue::Bool(true))
        ) {
            return Ok(());
        }
        let keys: Vec<WriteRequest> = (0..parts as usize)
            .map(|i| {
                let delete = built(
                    OP,
                    DeleteRequest::builder()
                        .set_key(Some(Self::item(pk, part_sk(calculation_id, i))))
                        .build(),
                )?;
                Ok(WriteRequest::builder().delete_request(delete).build())
            })
            .collect::<StoreResult<_>>()?;
        self.batch_write(OP, keys).await
    }

    /// The prices of a stored calculation, from its parts: with the explanations of its
    /// history entries (older parts: every explanation).
    async fn read_parts(
        &self,
        op: &str,
        pk: &str,
        calculation_id: &str,
        parts: u64,
    ) -> StoreResult<Vec<ItemPrice>> {
        let wanted = (0..parts as usize)
            .map(|i| (pk.to_owned(), part_sk(calculation_id, i)))
            .collect();
        let mut found: Vec<(String, Vec<ItemPrice>)> = Vec::new();
        for item in self.batch_get(op, wanted).await? {
            let sk = get_s(op, &item, SK)?.to_owned();
            let prices = if item.contains_key("fmt") {
                decode::<Vec<PartPrice>>(op, &item)?
                    .into_iter()
                    .map(PartPrice::into_item_price)
                    .collect()
            } else {
                decode(op, &item)?
            };
            found.push((sk, prices));
        }
        if found.len() as u64 != parts {
            return Err(corrupt(
                op,
                format!(
                    "calculation {calculation_id}: {} of {parts} parts",
                    found.len()
                ),
            ));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found.into_iter().flat_map(|(_, p)| p).collect())
    }
}

impl DynamoStore {
    /// The id and meta of the calculation the latest-calculation pointer `head` names.
    async fn marker_of(&self, op: &str, pk: &str, head: &Item) -> StoreResult<(String, CalcMeta)> {
        let calculation_id = get_s(op, head, "calc")?.to_owned();
        let marker = self
            .get(op, pk.to_owned(), &marker_sk(&calculation_id))
            .await?
            .ok_or_else(|| corrupt(op, format!("calculation {calculation_id} has no marker")))?;
        let meta: CalcMeta = decode(op, &marker)?;
        Ok((calculation_id, meta))
    }
}

impl PriceStore for DynamoStore {
    async fn save_calculation_with(
        &self,
        key: &InstanceKey,
        calculation: &PriceCalculation,
        events: SaveEvents<'_>,
    ) -> StoreResult<bool> {
        const OP: &str = "save_calculation";
        let pk = keys::instance_pk(key);
        let meta = CalcMeta {
            calculation_id: calculation.calculation_id.clone(),
            trigger: calculation.trigger,
            metadata: calculation.metadata.clone(),
            calculated_at: calculation.calculated_at,
            sequence: calculation.sequence,
        };
        if let Some(marker) = self
            .get(OP, pk.clone(), &marker_sk(&meta.calculation_id))
            .await?
        {
            // Stored already: finish it if a crash interrupted it.
            let listed = match events {
                SaveEvents::Listed(events) => Some(events),
                SaveEvents::PricesUpdated { .. } => None,
            };
            self.finish_interrupted(key, &pk, &marker, listed).await?;
            return Ok(false);
        }
        let (latest, replaced) = match self.get(OP, pk.clone(), HEAD).await? {
            Some(head) => (
                get_n(OP, &head, keys::SEQ)?,
                Some((
                    get_s(OP, &head, "calc")?.to_owned(),
                    get_n(OP, &head, "parts")?,
                )),
            ),
            None => (0, None),
        };
        if calculation.sequence != latest + 1 {
            return Err(StoreError::Conflict(format!(
                "sequence {} is not the next after {latest}",
                calculation.sequence
            )));
        }
        // 1. The prices, in parts keyed by calculation id.
        let records = encode_parts(OP, &calculation.prices)?;
        let parts = records.len();
        let counts = records
            .iter()
            .map(|(_, count)| count.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut items = Vec::with_capacity(parts);
        for (i, (record, _)) in records.into_iter().enumerate() {
            let mut item = Self::item(&pk, part_sk(&meta.calculation_id, i));
            item.insert(RECORD.to_owned(), s(record));
            item.insert("fmt".to_owned(), n(PART_FORMAT));
            items.push(item);
        }
        self.batch_put(OP, items).await?;
        // 2. Pointer, marker and events, atomically (the events one transaction holds:
        // all but those of a calculation of tens of thousands of prices, step 3).
        let records = encode_events(OP, events)?;
        let chunks = event_chunks(&records);
        let (first, rest) = chunks
            .split_first()
            .map_or((&[][..], &[][..]), |(f, r)| (*f, r));
        for attempt in 1.. {
            let mut actions = Vec::new();
            let head = Put::builder()
                .table_name(self.table())
                .item(PK, s(&pk))
                .item(SK, s(HEAD))
                .item(keys::SEQ, n(calculation.sequence))
                .item("calc", s(&meta.calculation_id))
                .item("parts", n(parts as u64))
                .item("counts", s(&counts));
            let head = if latest == 0 {
                head.condition_expression("attribute_not_exists(pk)")
            } else {
                head.condition_expression("seq = :prev")
                    .expression_attribute_values(":prev", n(latest))
            };
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, head.build())?)
                    .build(),
            );
            let marker = Put::builder()
                .table_name(self.table())
                .item(PK, s(&pk))
                .item(SK, s(marker_sk(&meta.calculation_id)))
                .item(RECORD, s(encode(OP, &meta)?))
                .item(keys::SEQ, n(calculation.sequence))
                .item("parts", n(parts as u64))
                .item("done", aws_sdk_dynamodb::types::AttributeValue::Bool(false));
            // The calculation this one replaces, for a replay to retire (step 4).
            let marker = match &replaced {
                Some((id, count)) => marker.item(REPLACED, s(id)).item(REPLACED_PARTS, n(*count)),
                None => marker,
            }
            .condition_expression("attribute_not_exists(pk)");
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, marker.build())?)
                    .build(),
            );
            actions.extend(self.event_writes(&pk, first).await?);
            match self.transact(OP, actions).await? {
                Ok(()) => break,
                Err(reasons) => {
                    if super::failed_at(&reasons, 1) {
                        return Ok(false);
                    }
                    if super::failed_at(&reasons, 0) {
                        return Err(StoreError::Conflict(format!(
                            "another calculation took sequence {}",
                            calculation.sequence
                        )));
                    }
                    // The event counter moved (another writer stored events): read again.
                    if attempt > 40 {
                        return Err(StoreError::Unavailable(format!(
                            "{OP}: kept losing the event counter"
                        )));
                    }
                    backoff(attempt).await;
                }
            }
        }
        // 3. The events the first transaction could not hold, before the done flag: a
        // replay writes those missing (above).
        for chunk in rest {
            self.write_event_records(OP, &pk, chunk).await?;
        }
        // 4. History, then the marker's done flag; then the replaced calculation retires.
        self.write_history(&pk, &meta, &calculation.prices).await?;
        self.retire(&pk, replaced).await?;
        Ok(true)
    }

    /// Whether the calculation is stored, its save finished first when one was cut off
    /// after its transaction (see [`DynamoStore::finish_interrupted`]): every caller asks
    /// this before it calculates, and a redelivered message answered "stored" never
    /// reached the save that finishes it.
    async fn has_calculation(&self, key: &InstanceKey, calculation_id: &str) -> StoreResult<bool> {
        const OP: &str = "has_calculation";
        let pk = keys::instance_pk(key);
        let Some(marker) = self.get(OP, pk.clone(), &marker_sk(calculation_id)).await? else {
            return Ok(false);
        };
        self.finish_interrupted(key, &pk, &marker, None).await?;
        Ok(true)
    }

    async fn latest_prices(&self, key: &InstanceKey) -> StoreResult<Option<PriceCalculation>> {
        const OP: &str = "latest_prices";
        let pk = keys::instance_pk(key);
        let Some(head) = self.get(OP, pk.clone(), HEAD).await? else {
            return Ok(None);
        };
        let (calculation_id, meta) = self.marker_of(OP, &pk, &head).await?;
        let prices = self
            .read_parts(OP, &pk, &calculation_id, get_n(OP, &head, "parts")?)
            .await?;
        Ok(Some(PriceCalculation {
            calculation_id,
            trigger: meta.trigger,
            metadata: meta.metadata,
            calculated_at: meta.calculated_at,
            sequence: meta.sequence,
            prices: prices
                .into_iter()
                .map(|p| ItemPrice {
                    explanation: Explanation::default(),
                    ..p
                })
                .collect(),
        }))
    }

    async fn latest_prices_page(
        &self,
        key: &InstanceKey,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Option<LatestPricesPage>> {
        const OP: &str = "latest_prices_page";
        let pk = keys::instance_pk(key);
        let Some(head) = self.get(OP, pk.clone(), HEAD).await? else {
            return Ok(None);
        };
        let Some(counts) = part_counts(OP, &head)? else {
            // A head written before the counts: the whole list, then the page.
            return Ok(self
                .latest_prices(key)
                .await?
                .map(|c| LatestPricesPage::of(c, offset, limit)));
        };
        let (calculation_id, meta) = self.marker_of(OP, &pk, &head).await?;
        // Only the parts that hold prices offset..offset + limit are read.
        let (mut wanted, mut start, mut first_start) = (Vec::new(), 0, None);
        for (i, count) in counts.iter().enumerate() {
            let end = start + count;
            if end > offset && start < offset.saturating_add(limit) {
                first_start.get_or_insert(start);
                wanted.push((pk.clone(), part_sk(&calculation_id, i)));
            }
            start = end;
        }
        let read = wanted.len();
        let mut found: Vec<(String, Vec<(ItemId, Money)>)> = Vec::with_capacity(read);
        for item in self.batch_get(OP, wanted).await? {
            let sk = get_s(OP, &item, SK)?.to_owned();
            let prices: Vec<ListedPrice> = decode(OP, &item)?;
            found.push((sk, prices.into_iter().map(|p| (p.i, p.p)).collect()));
        }
        if found.len() != read {
            return Err(corrupt(
                OP,
                format!(
                    "calculation {calculation_id}: {} of {read} parts",
                    found.len()
                ),
            ));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let skip = offset.saturating_sub(first_start.unwrap_or(0));
        Ok(Some(LatestPricesPage {
            prices: found
                .into_iter()
                .flat_map(|(_, p)| p)
                .skip(skip)
                .take(limit)
                .collect(),
            calculation_id,
            calculated_at: meta.calculated_at,
            sequence: meta.sequence,
            total: start,
        }))
    }

    async fn price_history(
        &self,
        key: &InstanceKey,
        item: &ItemId,
        page: &PageRequest,
    ) -> StoreResult<Page<PriceHistoryEntry>> {
        const OP: &str = "price_history";
        let pk = keys::instance_pk(key);
        let prefix = history_prefix(item);
        let mut q = Query::new("pk = :pk AND begins_with(sk, :prefix)")
            .value(":pk", s(pk.clone()))
            .value(":prefix", s(prefix.clone()))
            .max(page.limit.saturating_add(1));
        if let Some(cursor) = &page.cursor {
            let seq: u64 = cursor.parse().map_err(|_| StoreError::NotFound)?;
            q = q.after(pk.clone(), history_sk(item, seq));
        }
        let mut entries = Vec::new();
        for found in self.query(OP, q).await? {
            entries.push(decode::<PriceHistoryEntry>(OP, &found)?);
        }
        Ok(super::projects::page_of(entries, page.limit, |e| {
            e.sequence.to_string()
        }))
    }
}

impl PriceMatchStore for DynamoStore {
    async fn get_matches(&self, key: &InstanceKey) -> StoreResult<MatchSet> {
        const OP: &str = "get_matches";
        match self.get(OP, keys::instance_pk(key), MATCHES).await? {
            None => Ok(MatchSet::default()),
            Some(item) => Ok(MatchSet {
                rules: decode::<Vec<PriceMatch>>(OP, &item)?,
                version: get_n(OP, &item, "version")?,
            }),
        }
    }

    async fn put_matches(
        &self,
        key: &InstanceKey,
        rules: &[PriceMatch],
        expected_version: u64,
    ) -> StoreResult<()> {
        const OP: &str = "put_matches";
        let put = self
            .client()
            .put_item()
            .table_name(self.table())
            .item(PK, s(keys::instance_pk(key)))
            .item(SK, s(MATCHES))
            .item(RECORD, s(encode(OP, &rules)?))
            .item("version", n(expected_version + 1));
        let put = if expected_version == 0 {
            put.condition_expression("attribute_not_exists(pk)")
        } else {
            put.condition_expression("version = :v")
                .expression_attribute_values(":v", n(expected_version))
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(e) if super::is_condition_failed(&e) => Err(StoreError::Conflict(format!(
                "the price match rules changed since version {expected_version}"
            ))),
            Err(e) => Err(store_error(OP, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(count: usize, bytes: usize) -> Vec<(String, String)> {
        (0..count)
            .map(|i| (format!("evt_{i:04}"), "r".repeat(bytes)))
            .collect()
    }

    /// A calculation's events are cut into runs that one transaction holds: at most 90
    /// events (found by an outside review: the 104 actions of a 100,000-item instance's
    /// calculation, and its ~7.5 MB of `prices.updated` parts, were one transaction, which
    /// DynamoDB refuses; the emulator does not), and at most 3 MiB, in order, every event
    /// once.
    #[test]
    fn a_calculations_events_are_cut_to_what_a_transaction_holds() {
        assert_eq!(event_chunks(&[]), vec![&[][..]], "one empty run");
        let small = records(200, 100);
        let chunks = event_chunks(&small);
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            [90, 90, 20]
        );
        // 100 parts of 1,000 prices (~75 KB each).
        let parts = records(100, 75_000);
        let chunks = event_chunks(&parts);
        assert!(chunks.len() >= 3, "{} runs", chunks.len());
        for chunk in &chunks {
            assert!(!chunk.is_empty());
            let bytes: usize = chunk
                .iter()
                .map(|(id, r)| id.len() + r.len() + EVENT_ITEM_OVERHEAD)
                .sum();
            assert!(bytes <= EVENT_BYTES_PER_TRANSACTION, "{bytes} bytes");
        }
        let again: Vec<&(String, String)> = chunks.iter().flat_map(|c| c.iter()).collect();
        assert_eq!(again, parts.iter().collect::<Vec<_>>());
        // One event larger than the bytes of a run is a run of its own.
        let big = records(3, 3_500_000);
        assert_eq!(event_chunks(&big).len(), 3);
    }
}
