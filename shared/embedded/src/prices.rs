//! PriceStore: the latest calculation of each instance (one compact JSON snapshot: every
//! item's price, no explanations), a history row per price that changed (with its
//! explanation), and the calculation ids seen, all written in one transaction with the
//! calculation's events. A price a calculation left as it was costs its few bytes in the
//! latest snapshot and nothing in the history: the item's last history row explains it.

use pricing_core::ids::{InstanceKey, ItemId};
use pricing_core::model::{
    Page, PageRequest, PriceCalculation, PriceHistoryEntry, StoredPrice, StoredPriceRef,
    is_history_entry,
};
use pricing_core::money::Money;
use pricing_core::ports::{LatestPricesPage, PriceStore, SaveEvents, StoreError, StoreResult};
use pricing_core::pricing::{ItemPrice, Trigger};
use pricing_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::db::{DbResult, text, to_i64, to_u64};
use crate::projects::fetch_limit;
use crate::{EmbeddedStore, lock};

impl PriceStore for EmbeddedStore {
    async fn save_calculation_with(
        &self,
        key: &InstanceKey,
        calculation: &PriceCalculation,
        events: SaveEvents<'_>,
    ) -> StoreResult<bool> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        // Written from here, with the calculation and its events borrowed: the history rows
        // and events are encoded while they are inserted, a bounded number at a time (a
        // 100,000-item first calculation held ~100 MB of encoded rows when they were all
        // encoded first). Off the async workers when the runtime has others to take them over.
        let inner = &self.inner;
        let save = || -> StoreResult<bool> {
            let head = serde_json::to_string(&CalcHead {
                calculation_id: calculation.calculation_id.clone(),
                trigger: calculation.trigger,
                calculated_at: calculation.calculated_at,
            })
            .map_err(|e| StoreError::Failed(format!("save_calculation: encoding: {e}")))?;
            let latest = latest_head(calculation)
                .map_err(|e| StoreError::Failed(format!("save_calculation: encoding: {e}")))?;
            let mut conn = lock(&inner.writer);
            let saved = write_calculation(
                &mut conn,
                &project,
                &instance,
                &Calculation {
                    c: calculation,
                    head: &head,
                    latest: &latest,
                    events,
                },
            );
            saved.map_err(|e| e.into_store("save_calculation"))
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(save),
            _ => save(),
        }
    }

    async fn has_calculation(&self, key: &InstanceKey, calculation_id: &str) -> StoreResult<bool> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let id = calculation_id.to_owned();
        self.on_reader("has_calculation", move |conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT 1 FROM price_calculations
                     WHERE project_id = ?1 AND instance_id = ?2 AND calculation_id = ?3",
                )?
                .exists(params![project, instance, id])?)
        })
        .await
    }

    async fn latest_prices(&self, key: &InstanceKey) -> StoreResult<Option<PriceCalculation>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("latest_prices", move |conn| {
            // The pointer and its chunks in one snapshot: a calculation committed between
            // two reads would otherwise lend its prices to the previous one's id.
            let tx = conn.transaction()?;
            let Some(record) = latest_record(&tx, &project, &instance, |text| {
                Ok(serde_json::from_str::<LatestRecord>(text)?)
            })?
            else {
                return Ok(None);
            };
            if record.chunk_size.is_none() {
                return Ok(Some(record.into_calculation(Vec::new())));
            }
            let mut prices = Vec::with_capacity(record.total.unwrap_or(0).min(1 << 20));
            let mut chunks = tx.prepare_cached(
                "SELECT record FROM price_latest_chunks
                 WHERE project_id = ?1 AND instance_id = ?2 ORDER BY chunk",
            )?;
            let mut rows = chunks.query(params![project, instance])?;
            while let Some(row) = rows.next()? {
                let chunk: Vec<StoredPrice> = serde_json::from_str(text(row, 0)?)?;
                prices.extend(chunk.into_iter().map(StoredPrice::into_item_price));
            }
            Ok(Some(record.into_calculation(prices)))
        })
        .await
    }

    async fn latest_prices_page(
        &self,
        key: &InstanceKey,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Option<LatestPricesPage>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("latest_prices_page", move |conn| {
            // The pointer and its chunks in one snapshot (see `latest_prices`).
            let tx = conn.transaction()?;
            let Some((mut page, chunk_size)) = latest_record(&tx, &project, &instance, |text| {
                Ok(latest_page(text, offset, limit)?)
            })?
            else {
                return Ok(None);
            };
            let Some(size) = chunk_size.filter(|s| *s > 0) else {
                return Ok(Some(page));
            };
            // Only the chunks that hold the page are read.
            let first = offset / size;
            let mut chunks = tx.prepare_cached(
                "SELECT chunk, record FROM price_latest_chunks
                 WHERE project_id = ?1 AND instance_id = ?2 AND chunk >= ?3 ORDER BY chunk",
            )?;
            let mut rows =
                chunks.query(params![project, instance, to_i64(first as u64, "chunk")?])?;
            while page.prices.len() < limit {
                let Some(row) = rows.next()? else { break };
                let start = to_u64(row.get(0)?, "chunk")? as usize * size;
                let (prices, _) = page_of(
                    text(row, 1)?,
                    offset.saturating_sub(start),
                    limit - page.prices.len(),
                    |s: Stored| (s.i, s.p),
                )?;
                page.prices.extend(prices);
            }
            Ok(Some(page))
        })
        .await
    }

    async fn price_history(
        &self,
        key: &InstanceKey,
        item: &ItemId,
        page: &PageRequest,
    ) -> StoreResult<Page<PriceHistoryEntry>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let item = item.to_string();
        let after = match &page.cursor {
            None => 0,
            Some(c) => parse_cursor(c)?,
        };
        let limit = page.limit;
        self.on_reader("price_history", move |conn| {
            // The calculations by sequence, each with a primary-key lookup of the item's row
            // (CROSS JOIN keeps that loop order). Cost: one lookup per calculation after the
            // cursor until the page is full, so an item kept in many calculations in a row
            // costs a lookup for each of them.
            let mut stmt = conn.prepare_cached(
                "SELECT c.seq, c.record, h.record
                 FROM price_calculations c
                 CROSS JOIN price_history h
                   ON h.project_id = c.project_id AND h.instance_id = c.instance_id
                  AND h.seq = c.seq AND h.item_id = ?3
                 WHERE c.project_id = ?1 AND c.instance_id = ?2 AND c.seq > ?4
                 ORDER BY c.seq LIMIT ?5",
            )?;
            let mut rows =
                stmt.query(params![project, instance, item, after, fetch_limit(limit)])?;
            let mut items = Vec::new();
            while let Some(row) = rows.next()? {
                let sequence = to_u64(row.get(0)?, "price sequence")?;
                let head: CalcHead = serde_json::from_str(text(row, 1)?)?;
                let price: ItemPrice = serde_json::from_str(text(row, 2)?)?;
                items.push(PriceHistoryEntry {
                    sequence,
                    calculation_id: head.calculation_id,
                    trigger: head.trigger,
                    calculated_at: head.calculated_at,
                    price,
                });
            }
            let next = if items.len() > limit {
                items.truncate(limit);
                items.last().map(|e| e.sequence.to_string())
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
    }
}

/// The cursor of a history page: the last sequence listed, in decimal. One that does not
/// parse was not made by this store: `NotFound`, like an unknown event id after which to list.
fn parse_cursor(cursor: &str) -> StoreResult<i64> {
    cursor
        .parse::<u64>()
        .ok()
        .and_then(|s| i64::try_from(s).ok())
        .ok_or(StoreError::NotFound)
}

/// The fields of a calculation that its history entries repeat (`price_calculations.record`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CalcHead {
    calculation_id: String,
    trigger: Trigger,
    calculated_at: Timestamp,
}

/// `price_latest.record`: the calculation's head with its prices as [`StoredPriceRef`]s
/// in `stored` (`prices` empty). Records written before kept whole `ItemPrice`s in
/// `prices`; they read back the same way, without their explanations.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LatestRecord {
    calculation_id: String,
    trigger: Trigger,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    calculated_at: Timestamp,
    sequence: u64,
    #[serde(default)]
    prices: Vec<ItemPrice>,
    #[serde(default)]
    stored: Vec<StoredPrice>,
    /// Records written since schema version 10 keep their prices in
    /// `price_latest_chunks`, `chunk_size` to a row, `total` in all.
    #[serde(default)]
    chunk_size: Option<usize>,
    #[serde(default)]
    total: Option<usize>,
}

impl LatestRecord {
    /// The calculation, with `chunked` as its prices when the record keeps them in chunks.
    pub(crate) fn into_calculation(self, chunked: Vec<ItemPrice>) -> PriceCalculation {
        let prices = if self.chunk_size.is_some() {
            chunked
        } else if self.prices.is_empty() {
            self.stored
                .into_iter()
                .map(StoredPrice::into_item_price)
                .collect()
        } else {
            self.prices
                .into_iter()
                .map(|p| ItemPrice {
                    explanation: Default::default(),
                    ..p
                })
                .collect()
        };
        PriceCalculation {
            calculation_id: self.calculation_id,
            trigger: self.trigger,
            metadata: self.metadata,
            calculated_at: self.calculated_at,
            sequence: self.sequence,
            prices,
        }
    }
}

/// `read` of the instance's `price_latest.record`, `None` before its first calculation.
fn latest_record<T>(
    conn: &Connection,
    project: &str,
    instance: &str,
    read: impl FnOnce(&str) -> DbResult<T>,
) -> DbResult<Option<T>> {
    let mut stmt = conn.prepare_cached(
        "SELECT record FROM price_latest WHERE project_id = ?1 AND instance_id = ?2",
    )?;
    let mut rows = stmt.query(params![project, instance])?;
    match rows.next()? {
        None => Ok(None),
        Some(row) => read(text(row, 0)?).map(Some),
    }
}

/// A page of a `price_latest.record` read from its text: the head, and the prices of the
/// page decoded as item id and price only; the others, and every carried exposure, are
/// skipped over without being built.
/// With the record's chunk size when its prices are in `price_latest_chunks` (the page's
/// prices are then still to be read from there).
fn latest_page(
    record: &str,
    offset: usize,
    limit: usize,
) -> serde_json::Result<(LatestPricesPage, Option<usize>)> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head<'a> {
        calculation_id: String,
        calculated_at: Timestamp,
        sequence: u64,
        #[serde(default, borrow)]
        prices: Option<&'a RawValue>,
        #[serde(default, borrow)]
        stored: Option<&'a RawValue>,
        #[serde(default)]
        chunk_size: Option<usize>,
        #[serde(default)]
        total: Option<usize>,
    }
    /// A `prices` element of a record written before `stored` (an `ItemPrice`).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Whole {
        item_id: ItemId,
        price: Money,
    }
    let head: Head<'_> = serde_json::from_str(record)?;
    let (prices, total) = match (head.chunk_size, head.stored, head.prices) {
        (Some(_), _, _) => (Vec::new(), head.total.unwrap_or(0)),
        (None, Some(stored), _) => page_of(stored.get(), offset, limit, |s: Stored| (s.i, s.p))?,
        (None, None, Some(whole)) => {
            page_of(whole.get(), offset, limit, |w: Whole| (w.item_id, w.price))?
        }
        (None, None, None) => (Vec::new(), 0),
    };
    let page = LatestPricesPage {
        calculation_id: head.calculation_id,
        calculated_at: head.calculated_at,
        sequence: head.sequence,
        prices,
        total,
    };
    Ok((page, head.chunk_size))
}

/// A stored price (`StoredPriceRef`) read as its item id and price only.
#[derive(Deserialize)]
struct Stored {
    i: ItemId,
    p: Money,
}

/// Elements `offset..offset + limit` of the JSON array `array`, decoded as `T` and mapped,
/// and the array's length; the others are only scanned.
fn page_of<T, U>(
    array: &str,
    offset: usize,
    limit: usize,
    map: impl Fn(T) -> U,
) -> serde_json::Result<(Vec<U>, usize)>
where
    T: serde::de::DeserializeOwned,
{
    struct Page<T, U, F> {
        offset: usize,
        limit: usize,
        map: F,
        _decoded: std::marker::PhantomData<fn(T) -> U>,
    }
    impl<'de, T: serde::de::DeserializeOwned, U, F: Fn(T) -> U> serde::de::Visitor<'de>
        for Page<T, U, F>
    {
        type Value = (Vec<U>, usize);
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of prices")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(self.limit.min(4_096));
            let mut total = 0;
            loop {
                let wanted = total >= self.offset && total - self.offset < self.limit;
                let more = if wanted {
                    seq.next_element::<T>()?
                        .map(|t| out.push((self.map)(t)))
                        .is_some()
                } else {
                    seq.next_element::<serde::de::IgnoredAny>()?.is_some()
                };
                if !more {
                    return Ok((out, total));
                }
                total += 1;
            }
        }
    }
    let mut de = serde_json::Deserializer::from_str(array);
    serde::Deserializer::deserialize_seq(
        &mut de,
        Page {
            offset,
            limit,
            map,
            _decoded: std::marker::PhantomData,
        },
    )
}

/// A calculation to write: its head and snapshot encoded, its history rows and events
/// encoded while they are written.
struct Calculation<'a> {
    c: &'a PriceCalculation,
    head: &'a str,
    /// `price_latest.record`: see [`latest_head`].
    latest: &'a str,
    events: SaveEvents<'a>,
}

/// Prices per row of `price_latest_chunks`: a page of instancePrices reads the rows that
/// hold it, and a calculation writes its latest prices a row at a time (one string of a
/// 100,000-item instance's prices was ~20 MB, held twice while SQLite copied it).
pub(crate) const LATEST_CHUNK: usize = 1_000;

/// The schema version 10: the latest prices in chunks (see [`LATEST_CHUNK`]). Records
/// written before keep their prices inline and read as they did.
pub(crate) const SCHEMA_V10: &str = r#"
CREATE TABLE IF NOT EXISTS price_latest_chunks (
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    chunk       INTEGER NOT NULL,
    record      TEXT NOT NULL,
    PRIMARY KEY (project_id, instance_id, chunk)
);
"#;

/// The calculation's [`LatestRecord`] without its prices: its head, `"prices":[]`, the
/// chunk size and the number of prices (the prices go to `price_latest_chunks`).
pub(crate) fn latest_head(c: &PriceCalculation) -> serde_json::Result<String> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Record<'a> {
        calculation_id: &'a str,
        trigger: Trigger,
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<&'a serde_json::Value>,
        calculated_at: Timestamp,
        sequence: u64,
        prices: [(); 0],
        chunk_size: usize,
        total: usize,
    }
    serde_json::to_string(&Record {
        calculation_id: &c.calculation_id,
        trigger: c.trigger,
        metadata: c.metadata.as_ref(),
        calculated_at: c.calculated_at,
        sequence: c.sequence,
        prices: [],
        chunk_size: LATEST_CHUNK,
        total: c.prices.len(),
    })
}

/// Writes the calculation's prices as the instance's latest chunks (compact: no
/// explanations), one row of [`LATEST_CHUNK`] at a time, and drops the rows past them.
fn write_latest_chunks(
    tx: &rusqlite::Transaction<'_>,
    project: &str,
    instance: &str,
    prices: &[ItemPrice],
) -> DbResult<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO price_latest_chunks (project_id, instance_id, chunk, record)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project_id, instance_id, chunk) DO UPDATE SET record = excluded.record",
    )?;
    let mut json = Vec::new();
    let mut chunks = 0;
    for (i, chunk) in prices.chunks(LATEST_CHUNK).enumerate() {
        json.clear();
        let stored: Vec<StoredPriceRef<'_>> = chunk.iter().map(StoredPriceRef::of).collect();
        serde_json::to_writer(&mut json, &stored)?;
        insert.execute(params![
            project,
            instance,
            to_i64(i as u64, "chunk")?,
            utf8(&json)?
        ])?;
        chunks = i + 1;
    }
    tx.prepare_cached(
        "DELETE FROM price_latest_chunks WHERE project_id = ?1 AND instance_id = ?2 AND chunk >= ?3",
    )?
    .execute(params![project, instance, to_i64(chunks as u64, "chunk")?])?;
    Ok(())
}

/// History rows encoded per batch by the encoding thread.
const HISTORY_BATCH: usize = 512;
/// A large calculation's history rows are encoded in a second thread while the writer
/// inserts (at most two batches ahead of it); a small one's in the writer's thread.
const HISTORY_PARALLEL_FROM: usize = 2_048;

/// Inserts a history row for each price that goes into the history, in item id order (the
/// inserts append to the calculation's range in order). Never more than a few batches of
/// encoded rows exist at once.
fn insert_history(
    tx: &rusqlite::Transaction<'_>,
    project: &str,
    instance: &str,
    seq: i64,
    prices: &[ItemPrice],
) -> DbResult<()> {
    let mut changed: Vec<&ItemPrice> = prices.iter().filter(|p| is_history_entry(p)).collect();
    if !changed.is_sorted_by(|a, b| a.item_id <= b.item_id) {
        changed.sort_unstable_by(|a, b| a.item_id.cmp(&b.item_id));
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO price_history (project_id, instance_id, seq, item_id, record)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    if changed.len() < HISTORY_PARALLEL_FROM {
        let mut json = Vec::new();
        for p in changed {
            json.clear();
            serde_json::to_writer(&mut json, p)?;
            insert.execute(params![
                project,
                instance,
                seq,
                p.item_id.as_str(),
                utf8(&json)?
            ])?;
        }
        return Ok(());
    }
    std::thread::scope(|s| -> DbResult<()> {
        let (send, receive) = std::sync::mpsc::sync_channel::<serde_json::Result<Vec<String>>>(2);
        let changed = &changed;
        s.spawn(move || {
            for batch in changed.chunks(HISTORY_BATCH) {
                let encoded = batch.iter().map(serde_json::to_string).collect();
                // The writer stopped (an insert failed): nothing more to encode.
                if send.send(encoded).is_err() {
                    return;
                }
            }
        });
        let mut prices = changed.iter();
        for batch in receive {
            for json in batch? {
                let p = prices.next().ok_or_else(|| {
                    StoreError::Failed("save_calculation: more history rows than prices".into())
                })?;
                insert.execute(params![project, instance, seq, p.item_id.as_str(), json])?;
            }
        }
        Ok(())
    })
}

fn utf8(json: &[u8]) -> DbResult<&str> {
    std::str::from_utf8(json)
        .map_err(|e| StoreError::Failed(format!("save_calculation: encoding: {e}")).into())
}

fn write_calculation(
    conn: &mut Connection,
    project: &str,
    instance: &str,
    calc: &Calculation<'_>,
) -> DbResult<bool> {
    let c = calc.c;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // A replay first: its sequence may have been overtaken since, which is no conflict.
    let known = tx
        .prepare_cached(
            "SELECT 1 FROM price_calculations
             WHERE project_id = ?1 AND instance_id = ?2 AND calculation_id = ?3",
        )?
        .exists(params![project, instance, c.calculation_id])?;
    if known {
        return Ok(false);
    }
    let latest: Option<i64> = tx
        .prepare_cached("SELECT seq FROM price_latest WHERE project_id = ?1 AND instance_id = ?2")?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?;
    let latest = latest.map_or(Ok(0), |s| to_u64(s, "price sequence"))?;
    if latest.checked_add(1) != Some(c.sequence) {
        return Err(StoreError::Conflict(format!(
            "prices of {project}/{instance} are at sequence {latest}: calculation {} with \
             sequence {} does not follow",
            c.calculation_id, c.sequence
        ))
        .into());
    }
    let seq = to_i64(c.sequence, "price sequence")?;
    tx.prepare_cached(
        "INSERT INTO price_calculations (project_id, instance_id, seq, calculation_id, record)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![project, instance, seq, c.calculation_id, calc.head])?;
    tx.prepare_cached(
        "INSERT INTO price_latest (project_id, instance_id, seq, record) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project_id, instance_id)
         DO UPDATE SET seq = excluded.seq, record = excluded.record",
    )?
    .execute(params![project, instance, seq, calc.latest])?;
    write_latest_chunks(&tx, project, instance, &c.prices)?;
    {
        insert_history(&tx, project, instance, seq, &c.prices)?;
        // Event ids are deterministic: one already stored (a replay) is skipped.
        let mut event = tx.prepare_cached(
            "INSERT INTO events (project_id, instance_id, event_id, record)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project_id, instance_id, event_id) DO NOTHING",
        )?;
        // Encoded one at a time (a part of 1,000 prices is ~75 KB of JSON).
        let mut json = Vec::new();
        for e in calc.events.iter() {
            json.clear();
            serde_json::to_writer(&mut json, &e)?;
            event.execute(params![project, instance, e.id, utf8(&json)?])?;
        }
    }
    tx.commit()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(page: &LatestPricesPage) -> Vec<(String, f64)> {
        page.prices
            .iter()
            .map(|(i, p)| (i.to_string(), p.to_f64()))
            .collect()
    }

    /// Both forms of `price_latest.record` page the same way: `stored` (with exposures,
    /// skipped) and the whole `prices` of records written before it.
    #[test]
    fn a_page_of_either_record_form() {
        let stored = r#"{"calculationId":"c","trigger":"request","calculatedAt":"2026-03-04T05:06:07Z",
            "sequence":4,"prices":[],"stored":[
            {"i":"a","p":1.5,"e":{"levels":[[1.0,2.0]],"estimate":null}},
            {"i":"b","p":2,"d":[true,1.0]},
            {"i":"c","p":3.25,"k":true}]}"#;
        let page = latest_page(stored, 1, 5).expect("decodes").0;
        assert_eq!(ids(&page), vec![("b".into(), 2.0), ("c".into(), 3.25)]);
        assert_eq!(
            (page.total, page.sequence, page.calculation_id.as_str()),
            (3, 4, "c")
        );
        assert_eq!(
            ids(&latest_page(stored, 0, 1).expect("decodes").0),
            vec![("a".into(), 1.5)]
        );
        let past = latest_page(stored, 7, 1).expect("decodes").0;
        assert!(past.prices.is_empty());
        assert_eq!(past.total, 3);

        let whole = r#"{"calculationId":"c","trigger":"request","calculatedAt":"2026-03-04T05:06:07Z",
            "sequence":2,"prices":[
            {"itemId":"a","price":1.5,"previousPrice":null,"changed":true,"status":"calculated","explanation":{}},
            {"itemId":"b","price":2,"previousPrice":2,"changed":false,"status":"kept","explanation":{}}]}"#;
        let page = latest_page(whole, 0, 10).expect("decodes").0;
        assert_eq!(ids(&page), vec![("a".into(), 1.5), ("b".into(), 2.0)]);
        assert_eq!(page.total, 2);
        assert!(latest_page(r#"{"calculationId":"c"}"#, 0, 1).is_err());
    }
}
