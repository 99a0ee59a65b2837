//! EntryLog: the log head `LOG` (`last_seq`) in the instance's partition, the entries in
//! **segments** (one item per run of consecutive entries, deflate-compressed) in the log's
//! shard partitions, and the dedupe markers `T#{transactionId}` (-> `seq`) in the markers'
//! shard partitions (docs/aws.md, "append" and "An instance's write ceiling").
//!
//! - Sequences are cut into blocks of [`keys::LOG_BLOCK`]; a segment never spans two
//!   blocks, and block `b`'s segments live under `{instance pk}#L{b mod LOG_SHARDS}`, keyed
//!   `E#{last seq:020}` with `first` and the compressed records `z`. A reader finds the
//!   segment holding `seq` with one range query in its block's shard.
//! - A marker lives under `{instance pk}#T{fnv1a(id) mod MARKER_SHARDS}`. The instance's own
//!   partition takes one small update of `LOG` per transaction, whatever the entries.
//!
//! **An append is all or nothing**, as on the embedded store. The log is what
//! `LOG.last_seq` covers: entries past it are invisible (`read` stops there), so an append
//! becomes visible in the one transaction that moves `last_seq`.
//!
//! - An append that fits one TransactWriteItems (100 actions, ~3.5 MB of entries) is that
//!   transaction: the head update conditioned on the `last_seq` read before, on no live
//!   lease and on no uncleaned append (`dirty`), the segments and a marker per new
//!   transaction id. The first attempt does not read the markers: a marker that exists
//!   fails its `attribute_not_exists` condition, and the next attempt reads them.
//! - A larger one takes a **lease** on the head (`lease`, `lease_until`, and `dirty`,
//!   `dirty_to`: the range it may leave written; conditioned on the same `last_seq`, no live
//!   lease and no `dirty`), writes its chunks past `last_seq` (each chunk's transaction
//!   checks and renews the lease), and its last chunk moves `last_seq`, releases the lease,
//!   removes `dirty` and writes `APPEND#{lease}`, the record that the lease's markers were
//!   committed. A failure half way leaves invisible segments past `last_seq` and markers
//!   that carry the lease id without its `APPEND#` record, which planning treats as stale.
//!   The lease is released on failure; if the process dies, it expires after [`LEASE`].
//!   The next append finds `dirty` and first deletes the segments in `(last_seq,
//!   dirty_to]` (one transaction conditioned on the head and `dirty`), so segments past
//!   the head never outlive it into the visible log.
//!
//! - A small append that loses the race for the head queues in the instance's inbox and is
//!   committed with the others queued (see `inbox`): one transaction per drain round, not
//!   one per request.
//!
//! The head update also sets the instance's backlog marker (see `backlog.rs`).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write as _};
use std::ops::Range;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, LogRecord, NewEntry};
use pricing_core::ports::{EntryLog, StoreError, StoreResult};

use super::keys::{self, LAST_SEQ, PK, SEQ, SK};
use super::{
    DynamoStore, MAX_ATTEMPTS, Query, backoff, built, condition_held, encode, failed_count, get_n,
    get_n_opt, get_s, is_condition_failed, n, s,
};
use crate::error::corrupt;

mod inbox;

/// Actions per TransactWriteItems call.
const MAX_ACTIONS: usize = 100;
/// Bytes of entries and markers per chunk, below the 4 MB a transaction may write.
const CHUNK_BYTES: usize = 3_500_000;
/// Bytes of records (uncompressed JSON) per segment: compressed, a segment stays below
/// the 400 KB item limit (deflate grows incompressible data by well under 1 %).
const SEGMENT_BYTES: usize = 300_000;
/// Estimated bytes of a record beside its JWS and transaction id (JSON keys, sequence,
/// receivedAt).
const RECORD_OVERHEAD: usize = 100;
/// Estimated bytes of a marker item beside its transaction id (keys, seq, lease id).
const MARKER_OVERHEAD: usize = 120;
/// How long a lease holds without being renewed (each chunk renews it). An append of
/// 1,000 entries writes at most ~11 chunks, well within it.
const LEASE: Duration = Duration::from_secs(10);
/// How long an append waits for another append's lease to end (released or expired).
const LEASE_WAIT: Duration = Duration::from_secs(12);
/// After this (from the start of the append) an append starts no transaction that would
/// commit it, and fails (503, nothing stored): API Gateway answers a request that takes
/// 30 s, cold start included, with a 503 of its own, and an append committed after that
/// would be stored twice by the client's retry (entries without ids). The same bound as a
/// queued append's (`inbox::QUEUE_WAIT`).
const APPEND_DEADLINE: Duration = Duration::from_secs(20);
/// Attributes: the lease id on `LOG` and `T#…` items; its expiry (ms) on `LOG`.
const LEASE_ID: &str = "lease";
const LEASE_UNTIL: &str = "lease_until";
/// On `LOG`: the lease whose writes past `last_seq` may be left (until cleaned), and the
/// last sequence they may reach.
const DIRTY: &str = "dirty";
const DIRTY_TO: &str = "dirty_to";
/// On `LOG`: until when (ms) a large append waits for the lease (see `inbox`).
const WANT: &str = "want";
/// How long one mark of a large append's wait holds (it renews it while it waits).
const WANT_FOR: Duration = Duration::from_millis(1_500);
/// On a segment: its first sequence (its sort key names the last) and the records.
const FIRST: &str = "first";
const DATA: &str = "z";

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
        // The first attempt of a one-transaction append does not read the markers: their
        // conditions say whether an id is stored.
        let mut read_markers = false;
        while attempt < MAX_ATTEMPTS && started.elapsed() < APPEND_DEADLINE {
            let head = self.log_head(OP, &pk).await?;
            let now = now_ms();
            if head.leased_at(now) && inbox::fits(&entries) {
                // Another append holds the head (often a drain of queued ones): queue.
                return self.append_queued(&pk, &entries, started).await;
            }
            if head.leased_at(now) {
                // Another append is writing its chunks: wait for it, not counting attempts.
                if started.elapsed() > LEASE_WAIT {
                    break;
                }
                // A drain of queued appends holds it: ask for a turn (a drain gives the
                // lease up after its round, and queued callers leave it to this append).
                if head.lease.as_deref().is_some_and(inbox::is_drain_lease) {
                    self.want_lease(&pk, now).await;
                }
                let left = head.lease_until.saturating_sub(now).clamp(5, 200);
                tokio::time::sleep(Duration::from_millis(left)).await;
                continue;
            }
            attempt += 1;
            if let Some(dirty) = &head.dirty {
                // A leased append did not commit: delete what it wrote past the head first.
                self.clean(&pk, &head, dirty).await?;
                continue;
            }
            let stored = if read_markers {
                self.stored_ids(&pk, &entries, head.last).await?
            } else {
                HashMap::new()
            };
            let (plan, writes) = plan(&entries, &stored, head.last);
            if writes.is_empty() {
                return Ok(plan);
            }
            let (end, segments) = chunk_end(&writes, 0);
            if end == writes.len() {
                match self
                    .append_at_once(&pk, &head, now, &writes, &segments)
                    .await?
                {
                    Landed::Yes => return Ok(plan),
                    Landed::MarkerExists => read_markers = true,
                    // Lost the head to another append: queue, and be committed with
                    // the others (see `inbox`).
                    Landed::No if inbox::fits(&entries) => {
                        return self.append_queued(&pk, &entries, started).await;
                    }
                    Landed::No => {}
                }
            } else if !read_markers {
                // A leased append plans with the markers read.
                read_markers = true;
                continue;
            } else if self
                .append_leased(&pk, &head, &writes, started + APPEND_DEADLINE)
                .await?
            {
                return Ok(plan);
            }
            tracing::debug!(pk, attempt, "append lost a race; again");
            backoff(attempt).await;
        }
        Err(StoreError::Unavailable(format!(
            "append to {pk}: still contended after {attempt} attempts ({} ms)",
            started.elapsed().as_millis()
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
        // Only what the head covers: segments past it belong to an append not committed.
        let last = self.log_head(OP, &pk).await?.last;
        let mut out = Vec::new();
        // The next sequence wanted.
        let mut next = after + 1;
        while next <= last && out.len() < limit {
            // The segments of `next`'s block from the one holding `next` (keyed by their
            // last sequence, so the first one at or after `next`).
            let to = keys::log_block_end(next).min(last);
            let mut q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
                .value(":pk", s(keys::segment_pk(&pk, next)))
                .value(":from", s(keys::entry_sk(next)))
                .value(":to", s(keys::entry_sk(to)));
            'pages: loop {
                let (items, more) = self.query_page(OP, &q).await?;
                for item in &items {
                    let (first, records) = decode_segment(OP, item)?;
                    if first > next {
                        return Err(corrupt(
                            OP,
                            format!("{pk}: no segment holds sequence {next}"),
                        ));
                    }
                    for record in records {
                        if record.sequence >= next && out.len() < limit {
                            next = record.sequence + 1;
                            out.push(record);
                        }
                    }
                    if out.len() >= limit {
                        break 'pages;
                    }
                }
                match more {
                    Some(k) => q.start = Some(k),
                    None => break,
                }
            }
            if out.len() < limit && next <= to {
                return Err(corrupt(
                    OP,
                    format!("{pk}: no segment holds sequence {next}"),
                ));
            }
        }
        Ok(out)
    }

    async fn last_sequence(&self, key: &InstanceKey) -> StoreResult<u64> {
        Ok(self
            .log_head("last_sequence", &keys::instance_pk(key))
            .await?
            .last)
    }
}

/// What became of a one-transaction append.
enum Landed {
    Yes,
    /// Another writer moved the head (or held the item): plan again.
    No,
    /// A marker of a planned id exists: plan again with the markers read.
    MarkerExists,
}

/// The `LOG` item as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LogHead {
    last: u64,
    /// The lease id, if an append holds (or held) one.
    lease: Option<String>,
    lease_until: u64,
    /// A leased append that may have left segments in `(last, dirty_to]`.
    dirty: Option<String>,
    dirty_to: u64,
    /// Until when (ms) a large append waits for the lease: drains give it up and do not
    /// take it meanwhile (see `inbox`).
    want: u64,
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

/// The bytes of an entry's record in a segment (before compression).
fn record_bytes(w: &Write<'_>) -> usize {
    w.entry.jwt.len()
        + RECORD_OVERHEAD
        + w.entry
            .transaction_id
            .as_ref()
            .map_or(0, |t| t.as_str().len())
}

/// The chunk of `writes` starting at `start`: its end (exclusive) and its segments (runs
/// of `writes`, each within one block and [`SEGMENT_BYTES`]), within the action and size
/// limits of one transaction (one action for the head, one for a commit record, one per
/// segment and one per marker); at least one entry.
fn chunk_end(writes: &[Write<'_>], start: usize) -> (usize, Vec<Range<usize>>) {
    let mut actions = 2;
    let mut bytes = 0;
    let mut segments = Vec::new();
    let mut segment_start = start;
    let mut segment_bytes = 0;
    let mut end = start;
    for (i, w) in writes.iter().enumerate().skip(start) {
        let size = record_bytes(w);
        let new_segment = i == start
            || keys::log_block(w.seq) != keys::log_block(writes[i - 1].seq)
            || segment_bytes + size > SEGMENT_BYTES;
        let tid_len = w.entry.transaction_id.as_ref().map(|t| t.as_str().len());
        let cost = usize::from(new_segment) + usize::from(tid_len.is_some());
        let marker = tid_len.map_or(0, |l| l + MARKER_OVERHEAD);
        if i > start && (actions + cost > MAX_ACTIONS || bytes + size + marker > CHUNK_BYTES) {
            break;
        }
        if new_segment && i > start {
            segments.push(segment_start..i);
            segment_start = i;
            segment_bytes = 0;
        }
        actions += cost;
        bytes += size + marker;
        segment_bytes += size;
        end = i + 1;
    }
    segments.push(segment_start..end);
    (end, segments)
}

/// The compressed records of a segment.
fn encode_segment(op: &str, records: &[LogRecord]) -> StoreResult<Vec<u8>> {
    let json = encode(op, &records)?;
    let mut z = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(json.len() / 2),
        flate2::Compression::default(),
    );
    z.write_all(json.as_bytes())
        .and_then(|()| z.finish())
        .map_err(|e| StoreError::Failed(format!("{op}: compressing a segment: {e}")))
}

/// A segment item's first sequence and records (checked: consecutive, ending at its key).
fn decode_segment(op: &str, item: &super::Item) -> StoreResult<(u64, Vec<LogRecord>)> {
    let sk = get_s(op, item, SK)?;
    let last: u64 = sk
        .strip_prefix(keys::ENTRY_PREFIX)
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| corrupt(op, format!("segment key {sk:?}")))?;
    let first = get_n(op, item, FIRST)?;
    let Some(AttributeValue::B(z)) = item.get(DATA) else {
        return Err(corrupt(op, format!("segment {sk}: no records")));
    };
    let records = decode_records(op, sk, z.as_ref())?;
    let consecutive = records
        .iter()
        .enumerate()
        .all(|(i, r)| r.sequence == first + i as u64);
    if !consecutive || first + records.len() as u64 != last + 1 {
        return Err(corrupt(
            op,
            format!("segment {sk}: records are not {first}..={last}"),
        ));
    }
    Ok((first, records))
}

/// The records of a segment's (or a queued request's) compressed data.
fn decode_records(op: &str, sk: &str, z: &[u8]) -> StoreResult<Vec<LogRecord>> {
    let mut json = Vec::new();
    flate2::read::DeflateDecoder::new(z)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(op, format!("segment {sk}: {e}")))?;
    serde_json::from_slice(&json)
        .map_err(|e| corrupt(op, format!("segment {sk} does not decode: {e}")))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// "No live lease" (needs `:now`).
const NO_LIVE_LEASE: &str = "(attribute_not_exists(lease_until) OR lease_until < :now)";

impl DynamoStore {
    async fn log_head(&self, op: &str, pk: &str) -> StoreResult<LogHead> {
        let Some(item) = self.get(op, pk.to_owned(), keys::LOG_SK).await? else {
            return Ok(LogHead::default());
        };
        let string = |name: &str| match item.get(name) {
            Some(AttributeValue::S(v)) => Some(v.clone()),
            _ => None,
        };
        Ok(LogHead {
            last: get_n_opt(op, &item, LAST_SEQ)?.unwrap_or(0),
            lease: string(LEASE_ID),
            lease_until: get_n_opt(op, &item, LEASE_UNTIL)?.unwrap_or(0),
            dirty: string(DIRTY),
            dirty_to: get_n_opt(op, &item, DIRTY_TO)?.unwrap_or(0),
            want: get_n_opt(op, &item, WANT)?.unwrap_or(0),
        })
    }

    /// Deletes the segments a leased append that did not commit may have left past the
    /// head (in `(last, dirty_to]`), and the `dirty` mark with the last delete: each
    /// transaction is conditioned on the head, the mark and no live lease. Returns when
    /// done or when another writer changed the head (the caller reads it again).
    async fn clean(&self, pk: &str, head: &LogHead, dirty: &str) -> StoreResult<()> {
        const OP: &str = "append: clean an uncommitted append";
        let mut stale: Vec<(String, String)> = Vec::new();
        let mut from = head.last + 1;
        while from <= head.dirty_to {
            let to = keys::log_block_end(from).min(head.dirty_to);
            let q = Query::new("pk = :pk AND sk BETWEEN :from AND :to")
                .value(":pk", s(keys::segment_pk(pk, from)))
                .value(":from", s(keys::entry_sk(from)))
                .value(":to", s(keys::entry_sk(to)));
            for item in self.query(OP, q).await? {
                stale.push((
                    get_s(OP, &item, PK)?.to_owned(),
                    get_s(OP, &item, SK)?.to_owned(),
                ));
            }
            from = to + 1;
        }
        let batches: Vec<&[(String, String)]> = if stale.is_empty() {
            vec![&[]]
        } else {
            stale.chunks(MAX_ACTIONS - 1).collect()
        };
        for (i, batch) in batches.iter().enumerate() {
            let update = self
                .head_update(pk, head.last)
                .update_expression(if i + 1 == batches.len() {
                    "REMOVE dirty, dirty_to"
                } else {
                    "SET dirty = :dirty"
                })
                .condition_expression(format!(
                    "{} AND dirty = :dirty AND {NO_LIVE_LEASE}",
                    last_condition(head.last)
                ))
                .expression_attribute_values(":dirty", s(dirty))
                .expression_attribute_values(":now", n(now_ms()));
            let mut actions = vec![update_action(update)?];
            for (spk, ssk) in *batch {
                let delete = Delete::builder()
                    .table_name(self.table())
                    .key(PK, s(spk.clone()))
                    .key(SK, s(ssk.clone()))
                    .build();
                actions.push(
                    TransactWriteItem::builder()
                        .delete(built(OP, delete)?)
                        .build(),
                );
            }
            if self.transact(OP, actions).await?.is_err() {
                return Ok(());
            }
        }
        tracing::debug!(
            pk,
            dirty,
            segments = stale.len(),
            "cleaned an uncommitted append"
        );
        Ok(())
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
            .map(|t| (keys::marker_pk(pk, t.as_str()), keys::dedupe_sk(t.as_str())))
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

    /// One transaction: the head moves from `head.last` if no lease is live and nothing
    /// is left to clean, the segments and markers are written.
    async fn append_at_once(
        &self,
        pk: &str,
        head: &LogHead,
        now: u64,
        writes: &[Write<'_>],
        segments: &[Range<usize>],
    ) -> StoreResult<Landed> {
        const OP: &str = "append";
        let new_last = head.last + writes.len() as u64;
        let update = self
            .head_update(pk, head.last)
            .update_expression(
                "SET last_seq = :new, gsi1pk = :bpk, gsi1sk = :bsk REMOVE lease, lease_until, want",
            )
            .condition_expression(format!(
                "{} AND {NO_LIVE_LEASE} AND attribute_not_exists(dirty)",
                last_condition(head.last)
            ))
            .expression_attribute_values(":new", n(new_last))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":bpk", s(keys::backlog_pk(pk)))
            .expression_attribute_values(":bsk", s(pk));
        let mut actions = vec![update_action(update)?];
        actions.extend(self.write_actions(pk, writes, segments, None)?);
        Ok(match self.transact(OP, actions).await? {
            Ok(()) => Landed::Yes,
            // Action 0 is the head; the segments are unconditional: a failed condition
            // past it is a marker's.
            Err(reasons)
                if reasons
                    .iter()
                    .skip(1)
                    .any(|r| r.as_deref() == Some("ConditionalCheckFailed")) =>
            {
                Landed::MarkerExists
            }
            Err(_) => Landed::No,
        })
    }

    /// A leased append: takes the lease, writes the chunks past the head, commits with the
    /// last one. `Ok(false)` when another writer got there first (nothing of this append
    /// is visible); an error after the lease was taken releases it first.
    async fn append_leased(
        &self,
        pk: &str,
        head: &LogHead,
        writes: &[Write<'_>],
        deadline: Instant,
    ) -> StoreResult<bool> {
        let lease = format!("a_{}", ulid::Ulid::new());
        if !self
            .take_lease(pk, head, &lease, writes.len() as u64)
            .await?
        {
            return Ok(false);
        }
        let result = self
            .write_chunks(pk, head.last, &lease, writes, deadline)
            .await;
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

    async fn take_lease(
        &self,
        pk: &str,
        head: &LogHead,
        lease: &str,
        entries: u64,
    ) -> StoreResult<bool> {
        const OP: &str = "append: take the lease";
        let now = now_ms();
        let mut request = self
            .log_item_update(pk)
            .update_expression(
                "SET lease = :lease, lease_until = :until, dirty = :lease, dirty_to = :to \
                 REMOVE want",
            )
            .condition_expression(format!(
                "{} AND {NO_LIVE_LEASE} AND attribute_not_exists(dirty)",
                last_condition(head.last)
            ))
            .expression_attribute_values(":lease", s(lease))
            .expression_attribute_values(":until", n(now + millis(LEASE)))
            .expression_attribute_values(":to", n(head.last + entries))
            .expression_attribute_values(":now", n(now));
        if head.last > 0 {
            request = request.expression_attribute_values(":old", n(head.last));
        }
        condition_held(OP, request.send().await)
    }

    /// `LOG`'s UpdateItem (the caller adds the expression and the condition).
    fn log_item_update(&self, pk: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(self.table())
            .key(PK, s(pk))
            .key(SK, s(keys::LOG_SK))
    }

    /// Best effort: a lease that stays is only waited for until it expires. `dirty`
    /// stays: the next append deletes what this one may have written.
    async fn release_lease(&self, pk: &str, lease: &str) {
        let result = self
            .log_item_update(pk)
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

    /// Marks that a large append waits for a drain's lease, until [`WANT_FOR`] from `now`
    /// (only while a drain holds it). Best effort: without the mark it waits as before.
    async fn want_lease(&self, pk: &str, now: u64) {
        let result = self
            .log_item_update(pk)
            .update_expression("SET want = :until")
            .condition_expression("begins_with(lease, :drain) AND lease_until >= :now")
            .expression_attribute_values(":until", n(now + millis(WANT_FOR)))
            .expression_attribute_values(":drain", s(inbox::DRAIN_LEASE_PREFIX))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        if let Err(e) = result
            && !is_condition_failed(&e)
        {
            let e = crate::error::store_error("append: wait for the lease", e);
            tracing::debug!(pk, error = %e, "could not mark the wait for the lease");
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
        deadline: Instant,
    ) -> StoreResult<bool> {
        const OP: &str = "append (leased)";
        let mut start = 0;
        while start < writes.len() {
            let (end, segments) = chunk_end(writes, start);
            let committing = end == writes.len();
            // Past the deadline nothing is committed: the chunks written stay invisible
            // (`dirty`: the next append deletes them), and the caller answers 503.
            if Instant::now() >= deadline {
                return Err(StoreError::Unavailable(format!(
                    "append to {pk}: past its deadline before its commit; nothing stored"
                )));
            }
            let condition = format!("lease = :lease AND {}", last_condition(last));
            let update = if committing {
                self.head_update(pk, last)
                    .update_expression(
                        "SET last_seq = :new, gsi1pk = :bpk, gsi1sk = :bsk \
                         REMOVE lease, lease_until, dirty, dirty_to",
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
            actions.extend(self.write_actions(pk, writes, &segments, Some(lease))?);
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

    /// A Put per segment (unconditional: the head condition makes the range past the head
    /// ours, and `clean` emptied it) and per new marker (absent, or still the stale one
    /// planned over; a leased append's markers carry its lease id).
    fn write_actions(
        &self,
        pk: &str,
        writes: &[Write<'_>],
        segments: &[Range<usize>],
        lease: Option<&str>,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        const OP: &str = "append";
        let mut actions = Vec::with_capacity(segments.len() + writes.len());
        for range in segments {
            let run = &writes[range.clone()];
            let (Some(first), Some(last)) = (run.first(), run.last()) else {
                continue;
            };
            let records: Vec<LogRecord> = run
                .iter()
                .map(|w| LogRecord {
                    sequence: w.seq,
                    transaction_id: w.entry.transaction_id.clone(),
                    received_at: w.entry.received_at,
                    jwt: w.entry.jwt.clone(),
                })
                .collect();
            let put = Put::builder()
                .table_name(self.table())
                .item(PK, s(keys::segment_pk(pk, first.seq)))
                .item(SK, s(keys::entry_sk(last.seq)))
                .item(FIRST, n(first.seq))
                .item(
                    DATA,
                    AttributeValue::B(Blob::new(encode_segment(OP, &records)?)),
                );
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, put.build())?)
                    .build(),
            );
        }
        for w in writes
            [segments.first().map_or(0, |r| r.start)..segments.last().map_or(0, |r| r.end)]
            .iter()
        {
            let Some(t) = &w.entry.transaction_id else {
                continue;
            };
            let marker = Put::builder()
                .table_name(self.table())
                .item(PK, s(keys::marker_pk(pk, t.as_str())))
                .item(SK, s(keys::dedupe_sk(t.as_str())))
                .item(SEQ, n(w.seq));
            let marker = match w.stale {
                None => marker.condition_expression("attribute_not_exists(pk)"),
                Some(stale) => marker
                    .condition_expression("seq = :stale")
                    .expression_attribute_values(":stale", n(stale)),
            };
            let marker = match lease {
                Some(l) => marker.item(LEASE_ID, s(l)),
                None => marker,
            };
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, marker.build())?)
                    .build(),
            );
        }
        Ok(actions)
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

    pub(super) fn entry(tid: Option<&str>, size: usize) -> NewEntry {
        NewEntry {
            transaction_id: tid.map(|t| TransactionId::parse(t).expect("id")),
            received_at: Timestamp::parse("2026-01-01T00:00:00Z").expect("time"),
            jwt: "x".repeat(size),
        }
    }

    fn writes(entries: &[NewEntry]) -> Vec<Write<'_>> {
        plan(entries, &HashMap::new(), 0).1
    }

    fn spans((end, segments): (usize, Vec<Range<usize>>)) -> (usize, Vec<(usize, usize)>) {
        (
            end,
            segments.into_iter().map(|r| (r.start, r.end)).collect(),
        )
    }

    #[test]
    fn chunks_respect_the_transaction_limits() {
        // With ids: one action per marker, plus the head, the segment and the commit
        // record: 97 per chunk.
        let with_ids: Vec<NewEntry> = (0..120)
            .map(|i| entry(Some(&format!("t{i}")), 10))
            .collect();
        let w = writes(&with_ids);
        assert_eq!(spans(chunk_end(&w, 0)), (97, vec![(0, 97)]));
        assert_eq!(spans(chunk_end(&w, 97)), (120, vec![(97, 120)]));
        // Without ids: the entries of a block are one segment, one action.
        let without: Vec<NewEntry> = (0..1000).map(|_| entry(None, 300)).collect();
        let (end, segments) = chunk_end(&writes(&without), 0);
        assert_eq!(
            end, 1000,
            "1,000 small entries without ids are one transaction"
        );
        assert_eq!(segments, vec![0..256, 256..512, 512..768, 768..1000]);
        // Large entries: segments and chunks bounded by bytes.
        let big: Vec<NewEntry> = (0..100).map(|_| entry(None, 64 * 1024)).collect();
        let w = writes(&big);
        let (end, segments) = chunk_end(&w, 0);
        assert!(
            end * (64 * 1024 + RECORD_OVERHEAD) <= CHUNK_BYTES && end > 40,
            "{end}"
        );
        for r in &segments {
            let bytes: usize = w[r.clone()].iter().map(record_bytes).sum();
            assert!(bytes <= SEGMENT_BYTES && !r.is_empty(), "{r:?}: {bytes}");
        }
        assert_eq!(segments.first().map(|r| r.start), Some(0));
        assert_eq!(segments.last().map(|r| r.end), Some(end));
        // One entry always makes progress.
        let huge = vec![entry(None, 5_000_000)];
        assert_eq!(spans(chunk_end(&writes(&huge), 0)), (1, vec![(0, 1)]));
    }

    #[test]
    fn segments_never_span_a_block() {
        let entries: Vec<NewEntry> = (0..10).map(|_| entry(None, 10)).collect();
        // The log is at 250: sequences 251..=260 cross the block end at 256.
        let (_, w) = plan(&entries, &HashMap::new(), 250);
        assert_eq!(spans(chunk_end(&w, 0)), (10, vec![(0, 6), (6, 10)]));
        assert_eq!(keys::log_block_end(251), 256);
        assert_eq!(keys::log_block_end(257), 512);
        assert_ne!(
            keys::segment_pk("I#a/b", 256),
            keys::segment_pk("I#a/b", 257)
        );
        assert_eq!(keys::segment_pk("I#a/b", 1), keys::segment_pk("I#a/b", 256));
    }

    #[test]
    fn a_segment_round_trips_and_is_checked() {
        let records: Vec<LogRecord> = (5..=7)
            .map(|seq| LogRecord {
                sequence: seq,
                transaction_id: Some(TransactionId::parse(format!("t{seq}")).expect("id")),
                received_at: Timestamp::parse("2026-01-01T00:00:00Z").expect("time"),
                jwt: format!("eyJhbGciOiJFUzI1NiJ9.eyJuIjo{seq}fQ.c2ln"),
            })
            .collect();
        let z = encode_segment("test", &records).expect("encode");
        let item = |sk: u64, first: u64| -> super::super::Item {
            HashMap::from([
                (SK.to_owned(), s(keys::entry_sk(sk))),
                (FIRST.to_owned(), n(first)),
                (DATA.to_owned(), AttributeValue::B(Blob::new(z.clone()))),
            ])
        };
        assert_eq!(
            decode_segment("test", &item(7, 5)).expect("decode"),
            (5, records)
        );
        assert!(
            decode_segment("test", &item(8, 5)).is_err(),
            "key past the records"
        );
        assert!(
            decode_segment("test", &item(7, 4)).is_err(),
            "first before them"
        );
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
