//! EntryLog: one row per entry, keyed by (instance, sequence); a partial unique index on
//! (instance, transactionId) backs the deduplication.

use pricing_core::ids::{InstanceKey, TransactionId};
use pricing_core::model::{AppendOutcome, LogRecord, NewEntry};
use pricing_core::ports::{EntryLog, StoreError, StoreResult};
use pricing_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, text, to_i64, to_u64};

impl EntryLog for EmbeddedStore {
    async fn append(
        &self,
        key: &InstanceKey,
        entries: Vec<NewEntry>,
    ) -> StoreResult<Vec<AppendOutcome>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        // A group-commit job: concurrent appends share a transaction (see `group`).
        self.in_group("append", move |conn| {
            append(conn, &project, &instance, &entries)
        })
        .await
    }

    async fn read(
        &self,
        key: &InstanceKey,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<LogRecord>> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        // The processor reads the tail after each wake-up: a few entries under load, read
        // on this thread when a connection is free (no hand-off to the blocking pool and
        // back); what lies past the first INLINE_READ entries (a long tail, a large page)
        // is read on the blocking pool. Entries are appended in sequence order and never
        // change, so the two reads make one gapless run.
        let first = limit.min(INLINE_READ);
        let (p, i) = (project.clone(), instance.clone());
        let mut out = self
            .on_reader_inline("read_log", move |conn| {
                read_entries(conn, &p, &i, after, first)
            })
            .await?;
        if out.len() < first || limit == first {
            return Ok(out);
        }
        let last = out.last().map_or(after, |r| r.sequence);
        let rest = self
            .on_reader("read_log", move |conn| {
                read_entries(conn, &project, &instance, last, limit - first)
            })
            .await?;
        out.extend(rest);
        Ok(out)
    }

    async fn last_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        let project = key.project_storage_key();
        let instance = key.instance_id.to_string();
        self.on_reader("last_sequence", move |conn| {
            last_sequence(conn, &project, &instance)
        })
        .await
    }
}

/// Entries read on the calling thread at most (see `read`).
const INLINE_READ: usize = 64;

/// At most `limit` entries after `after`, in sequence order.
fn read_entries(
    conn: &Connection,
    project: &str,
    instance: &str,
    after: u64,
    limit: usize,
) -> DbResult<Vec<LogRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, transaction_id, received_at, jwt FROM entries
         WHERE project_id = ?1 AND instance_id = ?2 AND seq > ?3
         ORDER BY seq LIMIT ?4",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![project, instance, after, limit])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let transaction_id = match row.get_ref(1)?.as_str_or_null() {
            Ok(Some(t)) => Some(
                TransactionId::parse(t)
                    .map_err(|e| StoreError::Failed(format!("stored transaction id {t:?}: {e}")))?,
            ),
            Ok(None) => None,
            Err(e) => return Err(StoreError::Failed(format!("transaction id: {e}")).into()),
        };
        let received = text(row, 2)?;
        out.push(LogRecord {
            sequence: to_u64(row.get(0)?, "sequence")?,
            transaction_id,
            received_at: Timestamp::parse(received).ok_or_else(|| {
                StoreError::Failed(format!("stored receivedAt {received:?} is not RFC 3339"))
            })?,
            jwt: text(row, 3)?.to_owned(),
        });
    }
    Ok(out)
}

pub(crate) fn last_sequence(conn: &Connection, project: &str, instance: &str) -> DbResult<u64> {
    let last: Option<i64> = conn
        .prepare_cached(
            "SELECT last_seq FROM log_heads WHERE project_id = ?1 AND instance_id = ?2",
        )?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?;
    to_u64(last.unwrap_or(0), "sequence")
}

/// Inside the caller's transaction (a group commit's savepoint): every entry is either
/// accepted with the next sequence or found to be a duplicate (of a stored entry, of an
/// earlier one of the same call, or of one appended earlier in the same group).
fn append(
    tx: &Connection,
    project: &str,
    instance: &str,
    entries: &[NewEntry],
) -> DbResult<Vec<AppendOutcome>> {
    let first = last_sequence(tx, project, instance)? + 1;
    let mut next = first;
    let mut outcomes = Vec::with_capacity(entries.len());
    {
        let mut find = tx.prepare_cached(
            "SELECT seq FROM entries
             WHERE project_id = ?1 AND instance_id = ?2 AND transaction_id = ?3",
        )?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO entries (project_id, instance_id, seq, transaction_id, received_at, jwt)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for entry in entries {
            let tid = entry.transaction_id.as_ref().map(|t| t.as_str());
            if let Some(tid) = tid {
                let existing: Option<i64> = find
                    .query_row(params![project, instance, tid], |r| r.get(0))
                    .optional()?;
                if let Some(seq) = existing {
                    outcomes.push(AppendOutcome::Duplicate {
                        sequence: to_u64(seq, "sequence")?,
                    });
                    continue;
                }
            }
            insert.execute(params![
                project,
                instance,
                to_i64(next, "sequence")?,
                tid,
                entry.received_at.to_rfc3339(),
                entry.jwt,
            ])?;
            outcomes.push(AppendOutcome::Accepted { sequence: next });
            next += 1;
        }
        if next > first {
            tx.prepare_cached(
                "INSERT INTO log_heads (project_id, instance_id, last_seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT (project_id, instance_id) DO UPDATE SET last_seq = excluded.last_seq",
            )?
            .execute(params![project, instance, to_i64(next - 1, "sequence")?])?;
        }
    }
    Ok(outcomes)
}
