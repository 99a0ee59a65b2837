//! EntryLog: entries `E#{seq:020}`, dedupe markers `T#{transactionId}` (-> `seq`) and the
//! log head `LOG` (`last_seq`) in the instance's partition.
//!
//! **An append is all or nothing**, as on the embedded store (docs/aws.md, "append"). The
//! log is what `LOG.last_seq` covers: entries past it are invisible (`read` stops there),
//! so an append becomes visible in the one transaction that moves `last_seq`.
//!
//! - An append that fits one TransactWriteItems (100 actions, ~3.5 MB of entries) is that
//!   transaction: the head update conditioned on the `last_seq` read before and on no live
//!   lease, the entries and a marker per new transaction id.
//! - A larger one takes a **lease** on the head (`lease`, `lease_until`: conditioned on the
//!   same `last_seq` and no live lease), writes its chunks past `last_seq` (each chunk's
//!   transaction checks and renews the lease), and its last chunk moves `last_seq`, releases
//!   the lease and writes `APPEND#{lease}`, the record that the lease's writes were
//!   committed. A failure half way leaves invisible entries past `last_seq` (the next
//!   append overwrites them) and markers that carry the lease id without its `APPEND#`
//!   record, which planning treats as absent. The lease is released on failure; if the
//!   process dies, it expires after [`LEASE`].
//!
//! The head update also sets the instance's backlog marker (see `backlog.rs`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, LogRecord, NewEntry};
use pricing_core::ports::{EntryLog, StoreError, StoreResult};

use super::keys::{self, LAST_SEQ, PK, RECORD, SEQ, SK};
use super::{
    DynamoStore, MAX_ATTEMPTS, Query, backoff, built, decode, encode, failed_count, get_n,
    get_n_opt, get_s, is_condition_failed, n, s,
};

/// Actions per TransactWriteItems call.
const MAX_ACTIONS: usize = 100;
/// Bytes of entries per chunk, below the 4 MB a transaction may write.
const CHUNK_BYTES: usize = 3_500_000;
/// Estimated bytes of an entry's item beside its JWS (keys, JSON, receivedAt, lease id).
const ENTRY_OVERHEAD: usize = 350;
/// How long a lease holds without being renewed (each chunk renews it). An append of
/// 1,000 entries writes at most ~21 chunks, well within it.
const LEASE: Duration = Duration::from_secs(10);
/// How long an append waits for another append's lease to end (released or expired).
const LEASE_WAIT: Duration = Duration::from_secs(12);
/// Attributes: the lease id on `LOG`, `E#…` and `T#…` items; its expiry (ms) on `LOG`.
const LEASE_ID: &str = "lease";
const LEASE_UNTIL: &str = "lease_until";

impl EntryLog for DynamoStore {
    async fn append(
        &self,
        key: &InstanceKey,
        entries: Vec<NewEntry>,
    ) -> StoreResult<Vec<AppendOutcome>> {
        const OP: &str = "append";
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let pk = keys::instance_pk(key);
        let started = Instant::now();
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            let head = self.log_head(OP, &pk).await?;
            let now = now_ms();
            if head.leased_at(now) {
                // Another append is writing its chunks: wait for it, not counting attempts.
                if started.elapsed() > LEASE_WAIT {
                    break;
                }
                let left = head.lease_until.saturating_sub(now).clamp(5, 200);
                tokio::time::sleep(Duration::from_millis(left)).await;
                continue;
            }
            attempt += 1;
            let stored = self.stored_ids(&pk, &entries, head.last).await?;
            let (plan, writes) = plan(&entries, &stored, head.last);
            if writes.is_empty() {
                return Ok(plan);
            }
            let landed = if chunk_end(&writes, 0) == writes.len() {
                self.append_at_once(&pk, &head, now, &writes).await?
            } else {
                self.append_leased(&pk, &head, &writes).await?
            };
            if landed {
                return Ok(plan);
            }
            tracing::debug!(pk, attempt, "append lost a race; again");
            backoff(attempt).await;
        }
        Err(StoreError::Unavailable(format!(
            "append to {pk}: still contended after {attempt} attempts"
        )))
    }

    async fn read(
        &self,
        key: &InstanceKey,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<LogRecord>> {
        const OP: &str = "read_log";
        let pk = keys::instance_pk(key);
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Only what the head covers: entries past it belong to an append not committed.
        let last = self.log_head(OP, &pk).await?.last;
        if after >= last {
            return Ok(Vec::new());
        }
        let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
            .value(":pk", s(pk))
            .value(":from", s(keys::entry_sk(after + 1)))
            .value(":to", s(keys::entry_sk(last)))
            .max(limit);
        self.query(OP, q)
            .await?
            .iter()
            .map(|item| decode(OP, item))
            .collect()
    }

    async fn last_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        Ok(self
            .log_head("last_sequence", &keys::instance_pk(key))
            .await?
            .last)
    }
}

/// The `LOG` item as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LogHead {
    last: u64,
    /// The lease id, if an append holds (or held) one.
    lease: Option<String>,
    lease_until: u64,
}

impl LogHead {
    fn leased_at(&self, now_ms: u64) -> bool {
        self.lease.is_some() && self.lease_until >= now_ms
    }
}

/// What the log holds for a transaction id: a committed entry, or a marker that an append
/// wrote without committing (a failed lease), which may be overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    Committed(u64),
    Stale(u64),
}

/// One entry to write: its sequence, and the stale marker of its id to overwrite.
struct Write<'a> {
    seq: u64,
    entry: &'a NewEntry,
    stale: Option<u64>,
}

/// Outcomes in input order, and the entries to write: ids stored (committed) or seen
/// earlier in the call are duplicates; the others get `last + 1, +2, …`.
fn plan<'a>(
    entries: &'a [NewEntry],
    stored: &HashMap<String, Stored>,
    last: u64,
) -> (Vec<AppendOutcome>, Vec<Write<'a>>) {
    let mut planned: HashMap<&str, u64> = HashMap::new();
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut writes = Vec::new();
    let mut next = last + 1;
    for entry in entries {
        let tid = entry.transaction_id.as_ref().map(|t| t.as_str());
        let mut stale = None;
        if let Some(t) = tid {
            let seen = match stored.get(t) {
                Some(Stored::Committed(seq)) => Some(*seq),
                Some(Stored::Stale(seq)) => {
                    stale = Some(*seq);
                    planned.get(t).copied()
                }
                None => planned.get(t).copied(),
            };
            if let Some(sequence) = seen {
                outcomes.push(AppendOutcome::Duplicate { sequence });
                continue;
            }
            planned.insert(t, next);
        }
        outcomes.push(AppendOutcome::Accepted { sequence: next });
        writes.push(Write {
            seq: next,
            entry,
            stale,
        });
        next += 1;
    }
    (outcomes, writes)
}

/// The end (exclusive) of the chunk of `writes` starting at `start`: within the action and
/// size limits (one action for the head, one for a commit record), at least one entry.
fn chunk_end(writes: &[Write<'_>], start: usize) -> usize {
    let mut actions = 2;
    let mut bytes = 0;
    let mut end = start;
    for w in &writes[start..] {
        let tid_len = w.entry.transaction_id.as_ref().map(|t| t.as_str().len());
        let cost = 1 + usize::from(tid_len.is_some());
        let size = w.entry.jwt.len() + ENTRY_OVERHEAD + 2 * tid_len.unwrap_or(0);
        if end > start && (actions + cost > MAX_ACTIONS || bytes + size > CHUNK_BYTES) {
            break;
        }
        actions += cost;
        bytes += size;
        end += 1;
    }
    end
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl DynamoStore {
    async fn log_head(&self, op: &str, pk: &str) -> StoreResult<LogHead> {
        let Some(item) = self.get(op, pk.to_owned(), keys::LOG_SK).await? else {
            return Ok(LogHead::default());
        };
        Ok(LogHead {
            last: get_n_opt(op, &item, LAST_SEQ)?.unwrap_or(0),
            lease: match item.get(LEASE_ID) {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            },
            lease_until: get_n_opt(op, &item, LEASE_UNTIL)?.unwrap_or(0),
        })
    }

    /// What the log holds for the call's transaction ids: markers written by one
    /// transaction with the head (no lease id) are committed; a leased append's markers
    /// are committed when its `APPEND#` record exists and the head covers them.
    async fn stored_ids(
        &self,
        pk: &str,
        entries: &[NewEntry],
        last: u64,
    ) -> StoreResult<HashMap<String, Stored>> {
        const OP: &str = "append: read dedupe markers";
        let mut asked = HashSet::new();
        let wanted: Vec<(String, String)> = entries
            .iter()
            .filter_map(|e| e.transaction_id.as_ref())
            .filter(|t| asked.insert(t.as_str()))
            .map(|t| (pk.to_owned(), keys::dedupe_sk(t.as_str())))
            .collect();
        if wanted.is_empty() {
            return Ok(HashMap::new());
        }
        let markers = self
            .batch_get_projected(OP, wanted, &[SK, SEQ, LEASE_ID])
            .await?;
        let mut found: Vec<(String, u64, Option<String>)> = Vec::with_capacity(markers.len());
        for item in &markers {
            let sk = get_s(OP, item, SK)?;
            let tid = sk.strip_prefix("T#").unwrap_or(sk).to_owned();
            let lease = match item.get(LEASE_ID) {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            };
            found.push((tid, get_n(OP, item, SEQ)?, lease));
        }
        let leases: HashSet<&str> = found
            .iter()
            .filter(|(_, seq, _)| *seq <= last)
            .filter_map(|(_, _, lease)| lease.as_deref())
            .collect();
        let committed = self.committed_leases(pk, leases).await?;
        Ok(found
            .into_iter()
            .map(|(tid, seq, lease)| {
                let ok = match &lease {
                    None => true,
                    Some(l) => seq <= last && committed.contains(l),
                };
                (
                    tid,
                    if ok {
                        Stored::Committed(seq)
                    } else {
                        Stored::Stale(seq)
                    },
                )
            })
            .collect())
    }

    /// The leases among `leases` whose append committed (`APPEND#{lease}` exists).
    async fn committed_leases(
        &self,
        pk: &str,
        leases: HashSet<&str>,
    ) -> StoreResult<HashSet<String>> {
        const OP: &str = "append: read commit records";
        if leases.is_empty() {
            return Ok(HashSet::new());
        }
        let wanted = leases
            .into_iter()
            .map(|l| (pk.to_owned(), keys::append_sk(l)))
            .collect();
        let mut out = HashSet::new();
        for item in self.batch_get_projected(OP, wanted, &[SK]).await? {
            let sk = get_s(OP, &item, SK)?;
            if let Some(lease) = sk.strip_prefix(keys::APPEND_PREFIX) {
                out.insert(lease.to_owned());
            }
        }
        Ok(out)
    }

    /// One transaction: the head moves from `head.last` if no lease is live, the entries
    /// and markers are written. `Ok(false)` when another writer got there first.
    async fn append_at_once(
        &self,
        pk: &str,
        head: &LogHead,
        now: u64,
        writes: &[Write<'_>],
    ) -> StoreResult<bool> {
        const OP: &str = "append";
        let new_last = head.last + writes.len() as u64;
        let update = self
            .head_update(pk, head.last)
            .update_expression(
                "SET last_seq = :new, gsi1pk = :bpk, gsi1sk = :bsk REMOVE lease, lease_until",
            )
            .condition_expression(format!(
                "{} AND (attribute_not_exists(lease_until) OR lease_until < :now)",
                last_condition(head.last)
            ))
            .expression_attribute_values(":new", n(new_last))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":bpk", s(keys::backlog_pk(pk)))
            .expression_attribute_values(":bsk", s(pk));
        let mut actions = vec![update_action(update)?];
        actions.extend(self.write_actions(pk, writes, None)?);
        Ok(self.transact(OP, actions).await?.is_ok())
    }

    /// A leased append: takes the lease, writes the chunks past the head, commits with the
    /// last one. `Ok(false)` when another writer got there first (nothing of this append
    /// is visible); an error after the lease was taken releases it first.
    async fn append_leased(
        &self,
        pk: &str,
        head: &LogHead,
        writes: &[Write<'_>],
    ) -> StoreResult<bool> {
        let lease = format!("a_{}", ulid::Ulid::new());
        if !self.take_lease(pk, head, &lease).await? {
            return Ok(false);
        }
        let result = self.write_chunks(pk, head.last, &lease, writes).await;
        if !matches!(result, Ok(true)) {
            // Lost to another writer, or failed: nothing of it is visible either way.
            tracing::debug!(
                pk,
                lease,
                entries = writes.len(),
                ?result,
                "leased append did not commit"
            );
            self.release_lease(pk, &lease).await;
        }
        result
    }

    async fn take_lease(&self, pk: &str, head: &LogHead, lease: &str) -> StoreResult<bool> {
        const OP: &str = "append: take the lease";
        let now = now_ms();
        let mut request = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
            .update_expression("SET lease = :lease, lease_until = :until")
            .condition_expression(format!(
                "{} AND (attribute_not_exists(lease_until) OR lease_until < :now)",
                last_condition(head.last)
            ))
            .expression_attribute_values(":lease", s(lease))
            .expression_attribute_values(":until", n(now + millis(LEASE)))
            .expression_attribute_values(":now", n(now));
        if head.last > 0 {
            request = request.expression_attribute_values(":old", n(head.last));
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => Ok(false),
            Err(e) => Err(crate::error::store_error(OP, e)),
        }
    }

    /// Best effort: a lease that stays is only waited for until it expires.
    async fn release_lease(&self, pk: &str, lease: &str) {
        let result = self
            .client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
            .update_expression("REMOVE lease, lease_until")
            .condition_expression("lease = :lease")
            .expression_attribute_values(":lease", s(lease))
            .send()
            .await;
        if let Err(e) = result
            && !is_condition_failed(&e)
        {
            let e = crate::error::store_error("append: release the lease", e);
            tracing::warn!(pk, lease, error = %e, "lease not released; it expires");
        }
    }

    /// The chunks of a leased append, each one transaction that checks (and renews) the
    /// lease and the head; the last moves the head. `Ok(false)` when the lease was lost.
    async fn write_chunks(
        &self,
        pk: &str,
        last: u64,
        lease: &str,
        writes: &[Write<'_>],
    ) -> StoreResult<bool> {
        const OP: &str = "append (leased)";
        let mut start = 0;
        while start < writes.len() {
            let end = chunk_end(writes, start);
            let committing = end == writes.len();
            let condition = format!("lease = :lease AND {}", last_condition(last));
            let update = if committing {
                self.head_update(pk, last)
                    .update_expression(
                        "SET last_seq = :new, gsi1pk = :bpk, gsi1sk = :bsk REMOVE lease, lease_until",
                    )
                    .expression_attribute_values(":new", n(last + writes.len() as u64))
                    .expression_attribute_values(":bpk", s(keys::backlog_pk(pk)))
                    .expression_attribute_values(":bsk", s(pk))
            } else {
                self.head_update(pk, last)
                    .update_expression("SET lease_until = :until")
                    .expression_attribute_values(":until", n(now_ms() + millis(LEASE)))
            }
            .condition_expression(condition)
            .expression_attribute_values(":lease", s(lease));
            let mut actions = vec![update_action(update)?];
            actions.extend(self.write_actions(pk, &writes[start..end], Some(lease))?);
            if committing {
                let record = Put::builder()
                    .table_name(self.table())
                    .item(PK, s(pk))
                    .item(SK, s(keys::append_sk(lease)))
                    .item(LAST_SEQ, n(last + writes.len() as u64))
                    .build();
                actions.push(TransactWriteItem::builder().put(built(OP, record)?).build());
            }
            match self.transact(OP, actions).await {
                Ok(Ok(())) => {}
                Ok(Err(reasons)) => {
                    tracing::debug!(
                        pk,
                        failed = failed_count(&reasons),
                        "leased append chunk cancelled"
                    );
                    return Ok(false);
                }
                // The commit may have landed with its answer lost: its record says so.
                Err(e) if committing => {
                    return match self.get(OP, pk.to_owned(), &keys::append_sk(lease)).await {
                        Ok(Some(_)) => Ok(true),
                        _ => Err(e),
                    };
                }
                Err(e) => return Err(e),
            }
            start = end;
        }
        Ok(true)
    }

    /// An update of `LOG` (the caller adds the expression and the condition).
    fn head_update(&self, pk: &str, last: u64) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
        let update = Update::builder()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK));
        if last == 0 {
            update
        } else {
            update.expression_attribute_values(":old", n(last))
        }
    }

    /// A Put per entry (over whatever an uncommitted append left at its sequence: the head
    /// condition makes the range ours) and per new marker (absent, or still the stale one
    /// planned over). A leased append's items carry its lease id.
    fn write_actions(
        &self,
        pk: &str,
        writes: &[Write<'_>],
        lease: Option<&str>,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        const OP: &str = "append";
        let mut actions = Vec::with_capacity(2 * writes.len());
        for w in writes {
            let record = LogRecord {
                sequence: w.seq,
                transaction_id: w.entry.transaction_id.clone(),
                received_at: w.entry.received_at,
                jwt: w.entry.jwt.clone(),
            };
            let put = Put::builder()
                .table_name(self.table())
                .item(PK, s(pk))
                .item(SK, s(keys::entry_sk(w.seq)))
                .item(RECORD, s(encode(OP, &record)?));
            let put = with_lease(put, lease);
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, put.build())?)
                    .build(),
            );
            if let Some(t) = &w.entry.transaction_id {
                let marker = Put::builder()
                    .table_name(self.table())
                    .item(PK, s(pk))
                    .item(SK, s(keys::dedupe_sk(t.as_str())))
                    .item(SEQ, n(w.seq));
                let marker = match w.stale {
                    None => marker.condition_expression("attribute_not_exists(pk)"),
                    Some(stale) => marker
                        .condition_expression("seq = :stale")
                        .expression_attribute_values(":stale", n(stale)),
                };
                let marker = with_lease(marker, lease);
                actions.push(
                    TransactWriteItem::builder()
                        .put(built(OP, marker.build())?)
                        .build(),
                );
            }
        }
        Ok(actions)
    }
}

fn with_lease(
    put: aws_sdk_dynamodb::types::builders::PutBuilder,
    lease: Option<&str>,
) -> aws_sdk_dynamodb::types::builders::PutBuilder {
    match lease {
        Some(l) => put.item(LEASE_ID, s(l)),
        None => put,
    }
}

/// `last_seq` is still what was read (absent for an empty log).
fn last_condition(last: u64) -> &'static str {
    if last == 0 {
        "attribute_not_exists(last_seq)"
    } else {
        "last_seq = :old"
    }
}

fn update_action(
    update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
) -> StoreResult<TransactWriteItem> {
    Ok(TransactWriteItem::builder()
        .update(built("append", update.build())?)
        .build())
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

    fn writes(entries: &[NewEntry]) -> Vec<Write<'_>> {
        plan(entries, &HashMap::new(), 0).1
    }

    #[test]
    fn chunks_respect_the_transaction_limits() {
        // With ids: 2 actions each, plus the head and the commit record: 49 per chunk.
        let with_ids: Vec<NewEntry> = (0..120)
            .map(|i| entry(Some(&format!("t{i}")), 10))
            .collect();
        let w = writes(&with_ids);
        assert_eq!(chunk_end(&w, 0), 49);
        assert_eq!(chunk_end(&w, 49), 98);
        assert_eq!(chunk_end(&w, 98), 120);
        // Without ids: 98 per chunk.
        let without: Vec<NewEntry> = (0..150).map(|_| entry(None, 10)).collect();
        assert_eq!(chunk_end(&writes(&without), 0), 98);
        // Large entries: bounded by bytes.
        let big: Vec<NewEntry> = (0..100).map(|_| entry(None, 64 * 1024)).collect();
        let end = chunk_end(&writes(&big), 0);
        assert!(
            end * (64 * 1024 + ENTRY_OVERHEAD) <= CHUNK_BYTES && end > 40,
            "{end}"
        );
        // One entry always makes progress.
        let huge = vec![entry(None, 5_000_000)];
        assert_eq!(chunk_end(&writes(&huge), 0), 1);
    }

    #[test]
    fn planning_skips_committed_ids_and_overwrites_stale_markers() {
        let entries = vec![
            entry(Some("old"), 1),
            entry(Some("stale"), 1),
            entry(None, 1),
            entry(Some("stale"), 1),
            entry(Some("new"), 1),
        ];
        let stored = HashMap::from([
            ("old".to_owned(), Stored::Committed(3)),
            ("stale".to_owned(), Stored::Stale(12)),
        ]);
        let (outcomes, writes) = plan(&entries, &stored, 10);
        assert_eq!(
            outcomes,
            vec![
                AppendOutcome::Duplicate { sequence: 3 },
                AppendOutcome::Accepted { sequence: 11 },
                AppendOutcome::Accepted { sequence: 12 },
                AppendOutcome::Duplicate { sequence: 11 },
                AppendOutcome::Accepted { sequence: 13 },
            ]
        );
        let stale: Vec<(u64, Option<u64>)> = writes.iter().map(|w| (w.seq, w.stale)).collect();
        assert_eq!(stale, vec![(11, Some(12)), (12, None), (13, None)]);
    }

    #[test]
    fn a_lease_is_live_until_it_expires() {
        let mut head = LogHead::default();
        assert!(!head.leased_at(5));
        head.lease = Some("a_1".into());
        head.lease_until = 10;
        assert!(head.leased_at(10));
        assert!(!head.leased_at(11));
    }
}
