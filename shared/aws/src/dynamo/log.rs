//! EntryLog: entries `E#{seq:020}`, dedupe markers `T#{transactionId}` (-> `seq`) and the
//! log head `LOG` (`last_seq`) in the instance's partition.
//!
//! An append is written in chunks of at most 100 actions and ~3.5 MB (TransactWriteItems'
//! limits). Each chunk is one transaction: the head update conditioned on the `last_seq`
//! read before (so sequences stay gapless under concurrency), the entries, and a marker
//! per new transaction id conditioned on its absence (so an id is accepted once). A chunk
//! that loses a race is planned again from a fresh read of the head and of the markers.
//! The head update also sets the instance's backlog marker (see `backlog.rs`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, LogRecord, NewEntry};
use pricing_core::ports::{EntryLog, StoreError, StoreResult};

use super::keys::{self, LAST_SEQ, PK, RECORD, SEQ, SK};
use super::{
    DynamoStore, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_count, get_n,
    get_n_opt, get_s, n, s,
};

/// Actions per TransactWriteItems call.
const MAX_ACTIONS: usize = 100;
/// Bytes of entries per chunk, below the 4 MB a transaction may write.
const CHUNK_BYTES: usize = 3_500_000;
/// Estimated bytes of an entry's item beside its JWS (keys, JSON, receivedAt).
const ENTRY_OVERHEAD: usize = 300;

impl EntryLog for DynamoStore {
    async fn append(
        &self,
        key: &InstanceKey,
        entries: Vec<NewEntry>,
    ) -> StoreResult<Vec<AppendOutcome>> {
        let pk = keys::instance_pk(key);
        let mut outcomes = Vec::with_capacity(entries.len());
        // Transaction id -> sequence: accepted by this call, or found stored.
        let mut known: HashMap<String, u64> = HashMap::new();
        let mut start = 0;
        while start < entries.len() {
            let end = chunk_end(&entries, start);
            self.append_chunk(&pk, &entries[start..end], &mut known, &mut outcomes)
                .await?;
            start = end;
        }
        Ok(outcomes)
    }

    async fn read(
        &self,
        key: &InstanceKey,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<LogRecord>> {
        const OP: &str = "read_log";
        if limit == 0 || after == u64::MAX {
            return Ok(Vec::new());
        }
        let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
            .value(":pk", s(keys::instance_pk(key)))
            .value(":from", s(keys::entry_sk(after + 1)))
            .value(":to", s(keys::entry_sk(u64::MAX)))
            .max(limit);
        self.query(OP, q)
            .await?
            .iter()
            .map(|item| decode(OP, item))
            .collect()
    }

    async fn last_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        self.last_seq("last_sequence", keys::instance_pk(key)).await
    }
}

/// The end (exclusive) of the chunk starting at `start`: within the action and size
/// limits even if every entry turns out new, and at least one entry.
fn chunk_end(entries: &[NewEntry], start: usize) -> usize {
    let mut actions = 1; // the head update
    let mut bytes = 0;
    let mut end = start;
    for entry in &entries[start..] {
        let tid_len = entry.transaction_id.as_ref().map(|t| t.as_str().len());
        let cost = 1 + usize::from(tid_len.is_some());
        let size = entry.jwt.len() + ENTRY_OVERHEAD + 2 * tid_len.unwrap_or(0);
        if end > start && (actions + cost > MAX_ACTIONS || bytes + size > CHUNK_BYTES) {
            break;
        }
        actions += cost;
        bytes += size;
        end += 1;
    }
    end
}

impl DynamoStore {
    pub(crate) async fn last_seq(&self, op: &str, pk: String) -> StoreResult<u64> {
        match self.get(op, pk, keys::LOG_SK).await? {
            Some(item) => Ok(get_n_opt(op, &item, LAST_SEQ)?.unwrap_or(0)),
            None => Ok(0),
        }
    }

    async fn append_chunk(
        &self,
        pk: &str,
        chunk: &[NewEntry],
        known: &mut HashMap<String, u64>,
        outcomes: &mut Vec<AppendOutcome>,
    ) -> StoreResult<()> {
        const OP: &str = "append";
        for attempt in 1..=MAX_ATTEMPTS {
            let last = self.last_seq(OP, pk.to_owned()).await?;
            self.read_markers(pk, chunk, known).await?;

            // Plan: sequences from last + 1 for entries whose id is not known yet.
            let mut planned: HashMap<&str, u64> = HashMap::new();
            let mut plan = Vec::with_capacity(chunk.len());
            let mut writes: Vec<(u64, &NewEntry)> = Vec::new();
            let mut next = last + 1;
            for entry in chunk {
                let tid = entry.transaction_id.as_ref().map(|t| t.as_str());
                let seen = tid.and_then(|t| known.get(t).or_else(|| planned.get(t)).copied());
                if let Some(sequence) = seen {
                    plan.push(AppendOutcome::Duplicate { sequence });
                    continue;
                }
                if let Some(t) = tid {
                    planned.insert(t, next);
                }
                plan.push(AppendOutcome::Accepted { sequence: next });
                writes.push((next, entry));
                next += 1;
            }
            if writes.is_empty() {
                outcomes.extend(plan);
                return Ok(());
            }

            let actions = self.append_actions(pk, last, next - 1, &writes)?;
            match self.transact(OP, actions).await? {
                Ok(()) => {
                    known.extend(planned.into_iter().map(|(t, seq)| (t.to_owned(), seq)));
                    outcomes.extend(plan);
                    return Ok(());
                }
                Err(reasons) => {
                    tracing::debug!(
                        pk,
                        attempt,
                        failed = failed_count(&reasons),
                        "append chunk lost a race; again"
                    );
                    backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "append to {pk}: still contended after {MAX_ATTEMPTS} attempts"
        )))
    }

    /// Adds the stored sequences of the chunk's transaction ids not known yet.
    async fn read_markers(
        &self,
        pk: &str,
        chunk: &[NewEntry],
        known: &mut HashMap<String, u64>,
    ) -> StoreResult<()> {
        const OP: &str = "append: read dedupe markers";
        let mut wanted: Vec<(String, String)> = Vec::new();
        let mut asked = std::collections::HashSet::new();
        for t in chunk.iter().filter_map(|e| e.transaction_id.as_ref()) {
            if !known.contains_key(t.as_str()) && asked.insert(t.as_str()) {
                wanted.push((pk.to_owned(), keys::dedupe_sk(t.as_str())));
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        for item in self.batch_get(OP, wanted).await? {
            let sk = get_s(OP, &item, SK)?;
            let tid = sk.strip_prefix("T#").unwrap_or(sk).to_owned();
            known.insert(tid, get_n(OP, &item, SEQ)?);
        }
        Ok(())
    }

    fn append_actions(
        &self,
        pk: &str,
        last: u64,
        new_last: u64,
        writes: &[(u64, &NewEntry)],
    ) -> StoreResult<Vec<TransactWriteItem>> {
        const OP: &str = "append";
        let mut actions = Vec::with_capacity(1 + 2 * writes.len());
        let head = Update::builder()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
            .update_expression("SET last_seq = :new, gsi1pk = :bpk, gsi1sk = :bsk")
            .expression_attribute_values(":new", n(new_last))
            .expression_attribute_values(":bpk", s(keys::backlog_pk(pk)))
            .expression_attribute_values(":bsk", s(pk));
        let head = if last == 0 {
            head.condition_expression("attribute_not_exists(last_seq)")
        } else {
            head.condition_expression("last_seq = :old")
                .expression_attribute_values(":old", n(last))
        };
        actions.push(
            TransactWriteItem::builder()
                .update(built(OP, head.build())?)
                .build(),
        );
        for (seq, entry) in writes {
            let record = LogRecord {
                sequence: *seq,
                transaction_id: entry.transaction_id.clone(),
                received_at: entry.received_at,
                jwt: entry.jwt.clone(),
            };
            let put = Put::builder()
                .table_name(self.table())
                .item(PK, s(pk))
                .item(SK, s(keys::entry_sk(*seq)))
                .item(RECORD, s(encode(OP, &record)?))
                .condition_expression("attribute_not_exists(pk)")
                .build();
            actions.push(TransactWriteItem::builder().put(built(OP, put)?).build());
            if let Some(t) = &entry.transaction_id {
                let marker = Put::builder()
                    .table_name(self.table())
                    .item(PK, s(pk))
                    .item(SK, s(keys::dedupe_sk(t.as_str())))
                    .item(SEQ, n(*seq))
                    .condition_expression("attribute_not_exists(pk)")
                    .build();
                actions.push(TransactWriteItem::builder().put(built(OP, marker)?).build());
            }
        }
        Ok(actions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pricing_core::ids::TransactionId;
    use pricing_core::time::Timestamp;

    fn entry(tid: Option<&str>, size: usize) -> NewEntry {
        NewEntry {
            transaction_id: tid.map(|t| TransactionId::parse(t).expect("id")),
            received_at: Timestamp::parse("2026-01-01T00:00:00Z").expect("time"),
            jwt: "x".repeat(size),
        }
    }

    #[test]
    fn chunks_respect_the_transaction_limits() {
        // With ids: 2 actions each, plus the head: 49 per chunk.
        let with_ids: Vec<NewEntry> = (0..120)
            .map(|i| entry(Some(&format!("t{i}")), 10))
            .collect();
        assert_eq!(chunk_end(&with_ids, 0), 49);
        assert_eq!(chunk_end(&with_ids, 49), 98);
        assert_eq!(chunk_end(&with_ids, 98), 120);
        // Without ids: 99 per chunk.
        let without: Vec<NewEntry> = (0..150).map(|_| entry(None, 10)).collect();
        assert_eq!(chunk_end(&without, 0), 99);
        // Large entries: bounded by bytes.
        let big: Vec<NewEntry> = (0..100).map(|_| entry(None, 64 * 1024)).collect();
        let end = chunk_end(&big, 0);
        assert!(
            end * (64 * 1024 + ENTRY_OVERHEAD) <= CHUNK_BYTES && end > 40,
            "{end}"
        );
        // One entry always makes progress.
        let huge = vec![entry(None, 5_000_000)];
        assert_eq!(chunk_end(&huge, 0), 1);
    }
}
