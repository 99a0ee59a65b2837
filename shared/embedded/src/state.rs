//! StateStore: the header, item and product records of each instance, and the commit that
//! writes them (with events) conditionally on the header's applied sequence.

use std::collections::BTreeMap;

use pricing_core::ids::{InstanceKey, ItemId};
use pricing_core::ports::{
    Commit, MAX_COMMIT_RECORDS, ProjectSales, StateStore, StoreError, StoreResult,
};
use pricing_core::state::{Header, InstanceState, ItemState, ProductState};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, text, to_i64, to_u64};

impl StateStore for EmbeddedStore {
    async fn load_state(&self, key: &InstanceKey) -> StoreResult<InstanceState> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("load_state", move |conn| {
            load_state(conn, &project, &instance)
        })
        .await
    }

    async fn applied_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("applied_sequence", move |conn| {
            Ok(stored_applied(conn, &project, &instance)?.unwrap_or(0))
        })
        .await
    }

    async fn commit(&self, key: &InstanceKey, commit: Commit) -> StoreResult<()> {
        if commit.record_count() > MAX_COMMIT_RECORDS {
            return Err(StoreError::Failed(format!(
                "commit: {} records exceed the limit of {MAX_COMMIT_RECORDS} per commit",
                commit.record_count()
            )));
        }
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let encoded = Encoded::new(&commit)
            .map_err(|e| StoreError::Failed(format!("commit: encoding a record: {e}")))?;
        let expected = commit.expected_applied;
        self.on_writer("commit", move |conn| {
            write_commit(conn, &project, &instance, expected, &encoded)
        })
        .await
    }
}

/// A commit's records, encoded before taking the writer: items in their binary stored form
/// ([`crate::item_record`]), the others as JSON.
struct Encoded {
    applied: u64,
    header: String,
    items: Vec<(String, Vec<u8>)>,
    products: Vec<(String, String)>,
    events: Vec<(String, String)>,
}

impl Encoded {
    fn new(c: &Commit) -> serde_json::Result<Self> {
        Ok(Encoded {
            applied: c.header.applied_seq,
            header: serde_json::to_string(&c.header)?,
            items: c
                .items
                .iter()
                .map(|i| (i.item_id.to_string(), crate::item_record::encode(i)))
                .collect(),
            products: c
                .products
                .iter()
                .map(|p| Ok((p.product_id.to_string(), serde_json::to_string(p)?)))
                .collect::<serde_json::Result<_>>()?,
            events: c
                .events
                .iter()
                .map(|e| Ok((e.id.clone(), serde_json::to_string(e)?)))
                .collect::<serde_json::Result<_>>()?,
        })
    }
}

fn stored_applied(conn: &Connection, project: &str, instance: &str) -> DbResult<Option<u64>> {
    let applied: Option<i64> = conn
        .prepare_cached(
            "SELECT applied_seq FROM state_headers WHERE project_id = ?1 AND instance_id = ?2",
        )?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?;
    applied.map(|a| to_u64(a, "applied sequence")).transpose()
}

fn write_commit(
    conn: &mut Connection,
    project: &str,
    instance: &str,
    expected: u64,
    c: &Encoded,
) -> DbResult<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // A missing header is the default state: applied sequence 0.
    let stored = stored_applied(&tx, project, instance)?.unwrap_or(0);
    if stored != expected {
        return Err(StoreError::Conflict(format!(
            "state of {project}/{instance} is at sequence {stored}, not {expected}"
        ))
        .into());
    }
    tx.prepare_cached(
        "INSERT INTO state_headers (project_id, instance_id, applied_seq, record)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project_id, instance_id)
         DO UPDATE SET applied_seq = excluded.applied_seq, record = excluded.record",
    )?
    .execute(params![
        project,
        instance,
        to_i64(c.applied, "applied sequence")?,
        c.header
    ])?;
    {
        let mut item = tx.prepare_cached(
            "INSERT INTO state_items (project_id, instance_id, item_id, record)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project_id, instance_id, item_id) DO UPDATE SET record = excluded.record",
        )?;
        for (id, record) in &c.items {
            item.execute(params![project, instance, id, record])?;
        }
        let mut product = tx.prepare_cached(
            "INSERT INTO state_products (project_id, instance_id, product_id, record)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project_id, instance_id, product_id)
             DO UPDATE SET record = excluded.record",
        )?;
        for (id, record) in &c.products {
            product.execute(params![project, instance, id, record])?;
        }
        // Event ids are deterministic: a replayed commit does not duplicate its events.
        let mut event = tx.prepare_cached(
            "INSERT INTO events (project_id, instance_id, event_id, record)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project_id, instance_id, event_id) DO NOTHING",
        )?;
        for (id, record) in &c.events {
            event.execute(params![project, instance, id, record])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Header, items and products read in one transaction (a consistent snapshot).
fn load_state(conn: &mut Connection, project: &str, instance: &str) -> DbResult<InstanceState> {
    let tx = conn.transaction()?;
    let mut state = InstanceState::default();
    let header: Option<String> = tx
        .prepare_cached(
            "SELECT record FROM state_headers WHERE project_id = ?1 AND instance_id = ?2",
        )?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?;
    if let Some(header) = header {
        state.header = serde_json::from_str::<Header>(&header)?;
    }
    {
        let mut stmt = tx.prepare_cached(
            "SELECT record FROM state_items WHERE project_id = ?1 AND instance_id = ?2",
        )?;
        let mut rows = stmt.query(params![project, instance])?;
        // The records side by side in one buffer (one allocation, not one per record):
        // binary (a blob) or, written before schema version 9 and not rewritten, JSON.
        let mut records = Records::default();
        while let Some(row) = rows.next()? {
            records.push(match row.get_ref(0)? {
                ValueRef::Blob(b) | ValueRef::Text(b) => b,
                other => {
                    return Err(StoreError::Failed(format!(
                        "load_state: an item record is {:?}, not a blob or text",
                        other.data_type()
                    ))
                    .into());
                }
            });
        }
        state.items = decode_items(&records)?;
        let mut stmt = tx.prepare_cached(
            "SELECT record FROM state_products WHERE project_id = ?1 AND instance_id = ?2",
        )?;
        let mut rows = stmt.query(params![project, instance])?;
        while let Some(row) = rows.next()? {
            let product: ProductState = serde_json::from_str(text(row, 0)?)?;
            state.products.insert(product.product_id.clone(), product);
        }
    }
    tx.commit()?;
    Ok(state)
}

/// Records read from rows, kept in one buffer.
#[derive(Default)]
struct Records {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Records {
    fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Records `from..to`.
    fn range(&self, from: usize, to: usize) -> impl Iterator<Item = &[u8]> {
        let start = |i: usize| if i == 0 { 0 } else { self.ends[i - 1] };
        (from..to).map(move |i| &self.bytes[start(i)..self.ends[i]])
    }
}

/// Item records decoded (by [`crate::item_record::decode`]) into the map, in two
/// threads when there are many (decoding dominates the load of a large state), each into a
/// map of its own, joined at the end (no intermediate list of decoded records).
fn decode_items(records: &Records) -> DbResult<BTreeMap<ItemId, ItemState>> {
    const PARALLEL_FROM: usize = 2_048;
    let decode = |from: usize, to: usize| -> serde_json::Result<BTreeMap<ItemId, ItemState>> {
        let mut map = BTreeMap::new();
        for record in records.range(from, to) {
            let item = crate::item_record::decode(record)?;
            map.insert(item.item_id.clone(), item);
        }
        Ok(map)
    };
    let n = records.len();
    if n < PARALLEL_FROM {
        return Ok(decode(0, n)?);
    }
    let half = n / 2;
    let (left, right) = std::thread::scope(|s| {
        let handle = s.spawn(|| decode(half, n));
        let left = decode(0, half);
        (left, handle.join())
    });
    let mut right =
        right.map_err(|_| StoreError::Failed("load_state: a decoder panicked".into()))??;
    let mut out = left?;
    out.append(&mut right);
    Ok(out)
}

impl ProjectSales for EmbeddedStore {
    async fn past_products(
        &self,
        key: &InstanceKey,
        limit: usize,
    ) -> StoreResult<Vec<ProductState>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.on_reader("past_products", move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM state_products
                 WHERE project_id = ?1 AND instance_id IN (
                     SELECT instance_id FROM instances
                     WHERE project_id = ?1 AND instance_id != ?2
                     ORDER BY instance_id DESC LIMIT ?3)
                 ORDER BY instance_id DESC, product_id",
            )?;
            let mut rows = stmt.query(params![project, instance, limit])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(serde_json::from_str::<ProductState>(text(row, 0)?)?);
            }
            Ok(out)
        })
        .await
    }
}
