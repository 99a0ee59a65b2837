//! Group commit across invocations for small appends that lose the race for the head
//! (docs/aws.md, "Small appends under contention: the inbox").
//!
//! Every append moves `LOG.last_seq` in a transaction of its own, so one instance takes
//! one append per round trip on that item however many Lambda invocations send to it.
//! An append that fits [`fits`] and finds the head taken (another append moved it first,
//! or a lease is live) queues instead:
//!
//! 1. **Queue.** One PutItem `Q#{ulid}` under `{instance pk}#Q{fnv1a(ulid) mod
//!    INBOX_SHARDS}` holding its records (compressed, as a segment holds them). Nothing is
//!    visible to readers.
//! 2. **Drain.** Whoever gets the head's lease (conditioned on no live lease and nothing to
//!    clean; no `dirty`: a drain leaves nothing past the head) reads the inbox shards,
//!    plans the queued requests in their order exactly as one append of their entries
//!    (dedupe against the markers and within the batch), and commits as many whole
//!    requests as one transaction takes: the head moves (and renews the lease), the
//!    segments and markers are written, and each request's queue item is replaced by its
//!    outcome, conditioned on still being queued and on its caller's deadline (`until`).
//!    It repeats until the inbox is empty, its turn ([`DRAIN_TURN`]) is over or a large
//!    append waits for the lease (`want` on `LOG`), and releases the lease. While a
//!    round's transaction is in flight the next round is read, as if it committed.
//! 3. **Wait.** The caller polls its item: an outcome is its answer (it deletes the item);
//!    a lease that is free means nobody drains, so it drains itself. At its deadline, or
//!    on a failure not worth retrying, it withdraws its request (a delete conditioned on
//!    the item still being queued): a withdrawn request was never committed, and one the
//!    delete finds answered is read. No drain commits a request after its deadline.
//!
//! A request is committed whole or not at all (its entries and its outcome are in one
//! transaction), sequences stay gapless (the head moves in the transaction that writes
//! them), and a drainer that dies leaves its lease to expire after [`DRAIN_LEASE`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use pricing_core::model::{AppendOutcome, LogRecord, NewEntry};
use pricing_core::ports::{StoreError, StoreResult};

use super::super::keys::{self, PK, SK};
use super::super::{DynamoStore, Item, TTL_ATTRIBUTE, built, condition_held, get_s, n, s};
use super::{
    DATA, MAX_ACTIONS, NO_LIVE_LEASE, Stored, Write, chunk_end, encode_segment, last_condition,
    millis, now_ms, plan, update_action,
};
use crate::error::corrupt;

/// Partitions the inbox of one instance spreads over. Each takes ~1,000 write units per
/// second, and a queued one-entry request writes about 4 in its shard (its queue item 1,
/// its answer 2 in the drain's transaction, its deletion 1): 32 shards take ~8,000
/// requests per second. A drain round reads them all at once (a query each).
pub(super) const INBOX_SHARDS: u32 = 32;
/// The most entries of an append that may queue (the rest wait for the head as before).
const MAX_QUEUED_ENTRIES: usize = 32;
/// The most record bytes of an append that may queue (its item stays far below 400 KB).
const MAX_QUEUED_BYTES: usize = 96 * 1024;
/// How long a queued append waits for its outcome (from the start of the append) before
/// it withdraws and fails: longer than an append waits for a lease (the queue moves),
/// within the 30 s an API request may take.
const QUEUE_WAIT: Duration = Duration::from_secs(20);
/// How long a drainer's lease holds without a commit renewing it.
const DRAIN_LEASE: Duration = Duration::from_secs(3);
/// How long one caller drains before it gives up the lease (the waiting callers take it
/// again at once; a large append waiting for the head may take it instead).
const DRAIN_TURN: Duration = Duration::from_secs(1);
/// Queued requests read per shard and drain round: the oldest of each shard. A round
/// takes at most 98 requests, about 3 a shard, and the oldest of all is always among
/// these; reading more would only decode requests that wait for a later round.
const DRAIN_READ: usize = 16;
/// Items a query of an inbox shard evaluates per page (answered ones and those past their
/// deadline are filtered out of it).
const INBOX_PAGE: i32 = 100;
/// How long an unanswered or unread queue item lives (DynamoDB TTL): a caller that died
/// before deleting its answer leaves it for a day.
const QUEUE_TTL_SECS: u64 = 86_400;
/// The outcomes of a drained request: per entry its sequence, negative for a duplicate.
const OUTCOMES: &str = "o";
/// Until when (ms) a queued request may be committed: its caller's deadline. A drain
/// skips it after that and its answer is conditioned on it, so a request whose caller
/// failed or died is never committed behind its back.
const UNTIL: &str = "until";
/// Drains read the inbox again after a cancelled or failed round no sooner than this.
const DRAIN_RETRY: Duration = Duration::from_millis(20);
/// The prefix of a drain's lease id.
pub(super) const DRAIN_LEASE_PREFIX: &str = "q_";
/// How long after a request's deadline a failing withdrawal stops being tried (clocks of
/// two hosts differ by a little).
const WITHDRAW_MARGIN_MS: u64 = 1_000;
/// The operation name of a failed queued append's withdrawal.
const OP_GIVE_UP: &str = "append (queued): give up";
/// A waiting caller's first polling interval, in milliseconds; each next one is half as
/// long again, up to [`POLL_MAX_MS`] (and up to half of it more, at random): a drain
/// round is a few round trips, and a hundred waiting callers must not flood the table.
const POLL_FIRST_MS: u64 = 10;
const POLL_MAX_MS: u64 = 100;
/// A waiting caller reads the head (to drain when nobody does) every this many polls.
const HEAD_EVERY: u64 = 3;

/// Whether a lease on the head is a drain's (the lease ids a drain takes).
pub(super) fn is_drain_lease(lease: &str) -> bool {
    lease.starts_with(DRAIN_LEASE_PREFIX)
}

/// Whether `entries` may queue: small appends only, whose outcome one drain commits.
pub(super) fn fits(entries: &[NewEntry]) -> bool {
    entries.len() <= MAX_QUEUED_ENTRIES
        && entries
            .iter()
            .map(|e| e.jwt.len() + e.transaction_id.as_ref().map_or(0, |t| t.as_str().len()))
            .sum::<usize>()
            <= MAX_QUEUED_BYTES
}

/// One queued request as a drainer reads it.
struct Queued {
    pk: String,
    sk: String,
    entries: Vec<NewEntry>,
}

/// The requests of a drain round, with what they are planned against.
struct NextRound {
    queued: Vec<Queued>,
    /// The entries of `queued`, in order.
    entries: Vec<NewEntry>,
    /// The ids among them already stored (or committed by the round in flight).
    stored: HashMap<String, Stored>,
    /// The head the round moves on from.
    last: u64,
}

/// What a drain round commits if its transaction does.
struct Commits {
    /// The head after it.
    last: u64,
    /// The queue items it answers.
    answered: HashSet<String>,
    /// The sequences of the ids it writes.
    ids: HashMap<String, u64>,
    /// The entries it writes.
    entries: usize,
}

impl Commits {
    /// What a round commits: the requests `taken` with the `writes` of their entries, the
    /// head then at `last`.
    fn of(taken: &[Queued], writes: &[Write<'_>], last: u64) -> Commits {
        Commits {
            last,
            answered: taken.iter().map(|q| q.sk.clone()).collect(),
            ids: writes
                .iter()
                .filter_map(|w| {
                    let id = w.entry.transaction_id.as_ref()?;
                    Some((id.as_str().to_owned(), w.seq))
                })
                .collect(),
            entries: writes.len(),
        }
    }

    /// The requests of `queued` this round does not answer.
    fn left(&self, queued: Vec<Queued>) -> Vec<Queued> {
        queued
            .into_iter()
            .filter(|q| !self.answered.contains(&q.sk))
            .collect()
    }

    /// `stored` as it is once this round commits: its ids stored, with their sequences.
    fn stored_after(&self, stored: &mut HashMap<String, Stored>) {
        for (id, seq) in &self.ids {
            stored.insert(id.clone(), Stored::Committed(*seq));
        }
    }
}

impl DynamoStore {
    /// Queues `entries` (see the module) and waits for their outcomes until `started +
    /// QUEUE_WAIT`, draining when nobody else does.
    pub(super) async fn append_queued(
        &self,
        pk: &str,
        entries: &[NewEntry],
        started: Instant,
    ) -> StoreResult<Vec<AppendOutcome>> {
        const OP: &str = "append (queued)";
        let id = ulid::Ulid::new().to_string();
        let (qpk, qsk) = (keys::inbox_pk(pk, &id, INBOX_SHARDS), format!("Q#{id}"));
        let records: Vec<LogRecord> = entries
            .iter()
            .map(|e| LogRecord {
                sequence: 0,
                transaction_id: e.transaction_id.clone(),
                received_at: e.received_at,
                jwt: e.jwt.clone(),
            })
            .collect();
        let now = now_ms();
        let until = now + millis(QUEUE_WAIT.saturating_sub(started.elapsed()));
        let put = self
            .client
            .put_item()
            .table_name(self.table())
            .item(PK, s(qpk.clone()))
            .item(SK, s(qsk.clone()))
            .item(
                DATA,
                AttributeValue::B(Blob::new(encode_segment(OP, &records)?)),
            )
            .item(UNTIL, n(until))
            .item(TTL_ATTRIBUTE, n(now / 1000 + QUEUE_TTL_SECS))
            .send()
            .await;
        if let Err(e) = put {
            // It may have landed with its answer lost: take it back (or read its answer).
            let e = crate::error::store_error(OP, e);
            return self.give_up(&qpk, &qsk, entries.len(), until, e).await;
        }
        let mut poll = 0u64;
        loop {
            // Once queued, a read or a drain that is worth retrying does not fail the
            // request: it stays queued, and this or another caller commits it.
            let failed = match self.poll_queued(pk, &qpk, &qsk, entries.len(), poll).await {
                Ok(Some(outcomes)) => return Ok(outcomes),
                Ok(None) if started.elapsed() <= QUEUE_WAIT => None,
                Ok(None) => Some(StoreError::Unavailable(format!(
                    "append to {pk}: still queued after {:?}",
                    started.elapsed()
                ))),
                Err(e @ StoreError::Unavailable(_)) if started.elapsed() <= QUEUE_WAIT => {
                    tracing::warn!(pk, qsk, error = %e, "a queued append's poll failed");
                    None
                }
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                return self.give_up(&qpk, &qsk, entries.len(), until, e).await;
            }
            tokio::time::sleep(poll_wait(poll)).await;
            poll += 1;
        }
    }

    /// Withdraws a queued request that failed with `e`: withdrawn (or never stored), it
    /// was never committed and `e` is the answer; answered meanwhile, its outcomes are.
    /// A withdrawal that keeps failing is tried again until the request's deadline
    /// (`until`) has passed: after it no drain commits it, so `e` is then true as well.
    async fn give_up(
        &self,
        qpk: &str,
        qsk: &str,
        entries: usize,
        until: u64,
        e: StoreError,
    ) -> StoreResult<Vec<AppendOutcome>> {
        let withdrawn = loop {
            match self.withdraw(qpk, qsk).await {
                Ok(withdrawn) => break withdrawn,
                Err(failure) if now_ms() <= until + WITHDRAW_MARGIN_MS => {
                    tracing::debug!(qpk, qsk, error = %failure, "withdrawal failed; again");
                    tokio::time::sleep(DRAIN_RETRY).await;
                }
                Err(_) => return Err(e),
            }
        };
        match withdrawn {
            true => Err(e),
            // Never stored (its put failed before it landed), or answered.
            false => match self.get(OP_GIVE_UP, qpk.to_owned(), qsk).await? {
                Some(item) => self.take_outcome(qpk, qsk, &item, entries).await?.ok_or(e),
                None => Err(e),
            },
        }
    }

    /// One poll of a queued request: drains when nobody does (at once, then every few
    /// polls: the head is one hot item, while the outcome is read from the caller's own
    /// item in the inbox's shards), then reads the outcome.
    async fn poll_queued(
        &self,
        pk: &str,
        qpk: &str,
        qsk: &str,
        entries: usize,
        poll: u64,
    ) -> StoreResult<Option<Vec<AppendOutcome>>> {
        const OP: &str = "append (queued)";
        if poll.is_multiple_of(HEAD_EVERY) {
            let head = self.log_head(OP, pk).await?;
            let now = now_ms();
            if !head.leased_at(now) && head.want < now {
                if let Some(dirty) = &head.dirty {
                    self.clean(pk, &head, dirty).await?;
                }
                let lease = format!("{DRAIN_LEASE_PREFIX}{}", ulid::Ulid::new());
                if self.take_drain_lease(pk, &lease, now).await? {
                    let drained = self.drain(pk, &lease).await;
                    self.release_lease(pk, &lease).await;
                    drained?;
                }
            }
        }
        self.queued_outcome(qpk, qsk, entries).await
    }

    /// The outcomes of a queued request once a drain answered it (its item is deleted
    /// then, best effort: the TTL removes what is left).
    async fn queued_outcome(
        &self,
        qpk: &str,
        qsk: &str,
        entries: usize,
    ) -> StoreResult<Option<Vec<AppendOutcome>>> {
        const OP: &str = "append (queued): read the outcome";
        let Some(item) = self.get(OP, qpk.to_owned(), qsk).await? else {
            return Err(corrupt(
                OP,
                format!("{qpk} {qsk}: the queued request is gone"),
            ));
        };
        self.take_outcome(qpk, qsk, &item, entries).await
    }

    /// The outcomes of the queue item `item`, once answered (then the item is deleted: a
    /// best effort, it expires otherwise).
    async fn take_outcome(
        &self,
        qpk: &str,
        qsk: &str,
        item: &Item,
        entries: usize,
    ) -> StoreResult<Option<Vec<AppendOutcome>>> {
        const OP: &str = "append (queued): read the outcome";
        if !item.contains_key(OUTCOMES) {
            return Ok(None);
        }
        let outcomes = decode_outcomes(OP, get_s(OP, item, OUTCOMES)?, entries)?;
        let deleted = self
            .client
            .delete_item()
            .table_name(self.table())
            .key(PK, s(qpk))
            .key(SK, s(qsk))
            .send()
            .await;
        if let Err(e) = deleted {
            let e = crate::error::store_error(OP, e);
            tracing::debug!(qpk, qsk, error = %e, "answered queue item not deleted; it expires");
        }
        Ok(Some(outcomes))
    }

    /// Deletes a request still queued; false when a drain answered it first.
    async fn withdraw(&self, qpk: &str, qsk: &str) -> StoreResult<bool> {
        let result = self
            .client
            .delete_item()
            .table_name(self.table())
            .key(PK, s(qpk))
            .key(SK, s(qsk))
            .condition_expression("attribute_exists(z) AND attribute_not_exists(o)")
            .send()
            .await;
        condition_held("append (queued): withdraw", result)
    }

    /// The head's lease for a drain: no live lease, nothing to clean, and no large append
    /// waiting for it.
    async fn take_drain_lease(&self, pk: &str, lease: &str, now: u64) -> StoreResult<bool> {
        let result = self
            .log_item_update(pk)
            .update_expression("SET lease = :lease, lease_until = :until")
            .condition_expression(format!(
                "{NO_LIVE_LEASE} AND attribute_not_exists(dirty) AND \
                 (attribute_not_exists(want) OR want < :now)"
            ))
            .expression_attribute_values(":lease", s(lease))
            .expression_attribute_values(":until", n(now + millis(DRAIN_LEASE)))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        condition_held("append (queued): take the lease", result)
    }

    /// Commits the queued requests, round after round, while `lease` is held and the
    /// inbox holds any. Returns when it is empty or the lease is lost.
    ///
    /// Rounds are pipelined: while a round's transaction is in flight, the next round is
    /// read (the inbox without the requests in flight, and the markers of its ids) on the
    /// assumption that the transaction commits; the round's own ids count as stored and
    /// its head as the head. Should the transaction not commit, that reading is dropped and
    /// the next round reads the head again. A drain round is then about one transaction
    /// long instead of the reads and the transaction one after the other.
    async fn drain(&self, pk: &str, lease: &str) -> StoreResult<()> {
        const OP: &str = "append (queued): drain";
        let started = Instant::now();
        let mut next = self.next_round(pk, lease, None).await?;
        // Under a steady stream the inbox is never empty: the lease is given up after a
        // turn, and at once when a large append waits for it (the head's condition).
        while let Some(round) = next.take() {
            let (actions, commits) = self.round_actions(pk, lease, &round)?;
            let more = started.elapsed() <= DRAIN_TURN;
            let (sent, following) = tokio::join!(self.transact(OP, actions), async {
                match more {
                    true => self.next_round(pk, lease, Some(&commits)).await,
                    false => Ok(None),
                }
            });
            let retry = match sent {
                Ok(Ok(())) => {
                    tracing::debug!(
                        pk,
                        requests = commits.answered.len(),
                        entries = commits.entries,
                        "drained queued appends"
                    );
                    next = following?;
                    continue;
                }
                // A request withdrawn or past its deadline, a marker or the head changed,
                // or a large append waits: read again (the head read tells which).
                Ok(Err(reasons)) => {
                    tracing::debug!(pk, ?reasons, "drain round cancelled; reading again");
                    true
                }
                // Landed or not, the next round reads what is so.
                Err(e @ StoreError::Unavailable(_)) => {
                    tracing::debug!(pk, error = %e, "drain round failed; reading again");
                    true
                }
                Err(e) => return Err(e),
            };
            if retry && more {
                tokio::time::sleep(DRAIN_RETRY).await;
                next = self.next_round(pk, lease, None).await?;
            }
        }
        Ok(())
    }

    /// The requests of the next drain round and what they are planned against: the oldest
    /// queued requests that one transaction could hold (the head, a segment, and per
    /// request its answer and a marker per id) and the markers of their ids. Without
    /// `after`, the head is read and the round is none unless `lease` is live and no large
    /// append waits; with `after` (a round in flight), it is planned as if that round
    /// committed. None when nothing is queued.
    async fn next_round(
        &self,
        pk: &str,
        lease: &str,
        after: Option<&Commits>,
    ) -> StoreResult<Option<NextRound>> {
        const OP: &str = "append (queued): drain";
        let queued = self.read_inbox(pk).await?;
        let (queued, last): (Vec<Queued>, u64) = match after {
            Some(c) => (c.left(queued), c.last),
            None if queued.is_empty() => return Ok(None),
            None => {
                let head = self.log_head(OP, pk).await?;
                let now = now_ms();
                if head.lease.as_deref() != Some(lease) || !head.leased_at(now) || head.want >= now
                {
                    return Ok(None);
                }
                (queued, head.last)
            }
        };
        if queued.is_empty() {
            return Ok(None);
        }
        let mut room = MAX_ACTIONS - 2;
        let considered = queued
            .iter()
            .take_while(|q| {
                let cost = 1 + q
                    .entries
                    .iter()
                    .filter(|e| e.transaction_id.is_some())
                    .count();
                let fits = cost <= room;
                room = room.saturating_sub(cost);
                fits
            })
            .count()
            .max(1);
        let mut queued = queued;
        queued.truncate(considered);
        let all: Vec<NewEntry> = queued.iter().flat_map(|q| q.entries.clone()).collect();
        let mut stored = self.stored_ids(pk, &all, last).await?;
        if let Some(c) = after {
            c.stored_after(&mut stored);
        }
        Ok(Some(NextRound {
            queued,
            entries: all,
            stored,
            last,
        }))
    }

    /// The transaction of a drain round, and what it commits: as many whole requests of
    /// `round` as it holds. The head moves (conditioned on `lease`, the head the round was
    /// planned on and no large append waiting), the segments and markers are written, and
    /// each request's queue item is replaced by its outcomes (conditioned on its still
    /// being queued and on its caller's deadline).
    fn round_actions(
        &self,
        pk: &str,
        lease: &str,
        round: &NextRound,
    ) -> StoreResult<(Vec<TransactWriteItem>, Commits)> {
        const OP: &str = "append (queued): drain";
        let now = now_ms();
        let (outcomes, writes) = plan(&round.entries, &round.stored, round.last);
        let (take, writes_taken) = requests_in_one_transaction(&round.queued, &outcomes, &writes);
        let writes = &writes[..writes_taken];
        let segments = if writes.is_empty() {
            Vec::new()
        } else {
            chunk_end(writes, 0).1
        };
        let new_last = round.last + writes.len() as u64;
        let mut update = self
            .head_update(pk, round.last)
            .condition_expression(format!(
                "lease = :lease AND {} AND (attribute_not_exists(want) OR want < :now)",
                last_condition(round.last)
            ))
            .expression_attribute_values(":lease", s(lease))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":until", n(now + millis(DRAIN_LEASE)));
        update = if writes.is_empty() {
            update.update_expression("SET lease_until = :until")
        } else {
            update
                .update_expression(
                    "SET last_seq = :new, lease_until = :until, gsi1pk = :bpk, gsi1sk = :bsk",
                )
                .expression_attribute_values(":new", n(new_last))
                .expression_attribute_values(":bpk", s(keys::backlog_pk(pk)))
                .expression_attribute_values(":bsk", s(pk))
        };
        let mut actions = vec![update_action(update)?];
        actions.extend(self.write_actions(pk, writes, &segments, None)?);
        let mut at = 0;
        for q in &round.queued[..take] {
            let mine = &outcomes[at..at + q.entries.len()];
            at += q.entries.len();
            let answer = Put::builder()
                .table_name(self.table())
                .item(PK, s(q.pk.clone()))
                .item(SK, s(q.sk.clone()))
                .item(OUTCOMES, s(encode_outcomes(mine)))
                .item(TTL_ATTRIBUTE, n(now / 1000 + QUEUE_TTL_SECS))
                .condition_expression(
                    "attribute_exists(z) AND attribute_not_exists(o) AND #until > :now",
                )
                .expression_attribute_names("#until", UNTIL)
                .expression_attribute_values(":now", n(now));
            actions.push(
                TransactWriteItem::builder()
                    .put(built(OP, answer.build())?)
                    .build(),
            );
        }
        Ok((
            actions,
            Commits::of(&round.queued[..take], writes, new_last),
        ))
    }

    /// The requests queued for `pk`, oldest first (answered ones are skipped).
    async fn read_inbox(&self, pk: &str) -> StoreResult<Vec<Queued>> {
        const OP: &str = "append (queued): read the inbox";
        let now = now_ms();
        let reads = (0..INBOX_SHARDS).map(|shard| self.read_inbox_shard(pk, shard, now));
        let mut items = Vec::new();
        for shard in futures_util::future::join_all(reads).await {
            items.extend(shard?);
        }
        let mut queued = Vec::with_capacity(items.len());
        for item in &items {
            if item.contains_key(OUTCOMES) {
                continue;
            }
            let Some(AttributeValue::B(z)) = item.get(DATA) else {
                continue;
            };
            let sk = get_s(OP, item, SK)?.to_owned();
            // An item that does not decode is left to its caller's deadline (and the
            // TTL): it must not stop the others' drain.
            let records = match super::decode_records(OP, &sk, z.as_ref()) {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(pk, sk, error = %e, "a queued append does not decode; skipped");
                    continue;
                }
            };
            queued.push(Queued {
                pk: get_s(OP, item, PK)?.to_owned(),
                sk,
                entries: records
                    .into_iter()
                    .map(|r| NewEntry {
                        transaction_id: r.transaction_id,
                        received_at: r.received_at,
                        jwt: r.jwt,
                    })
                    .collect(),
            });
        }
        queued.sort_by(|a, b| a.sk.cmp(&b.sk));
        Ok(queued)
    }
}

/// How long a waiting caller sleeps after its `poll`-th poll (see [`POLL_FIRST_MS`]).
fn poll_wait(poll: u64) -> Duration {
    let base = (POLL_FIRST_MS as f64 * 1.5f64.powi(poll.min(16) as i32)).min(POLL_MAX_MS as f64);
    let jitter = (ulid::Ulid::new().random() % 1_000) as f64 / 1_000.0 * base / 2.0;
    Duration::from_millis((base + jitter) as u64)
}

impl DynamoStore {
    /// Up to [`DRAIN_READ`] requests of one inbox shard still to drain, oldest first:
    /// answered ones (whose callers have not deleted them yet, or died) and ones past
    /// their deadline are filtered out by the query, page after page, so that however
    /// many of them a shard holds they never hide a queued request.
    async fn read_inbox_shard(&self, pk: &str, shard: u32, now: u64) -> StoreResult<Vec<Item>> {
        const OP: &str = "append (queued): read the inbox";
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :pk AND begins_with(sk, :q)")
                .filter_expression("attribute_not_exists(o) AND #until > :now")
                .expression_attribute_names("#until", UNTIL)
                .expression_attribute_values(":pk", s(keys::inbox_shard_pk(pk, shard)))
                .expression_attribute_values(":q", s("Q#"))
                .expression_attribute_values(":now", n(now))
                .consistent_read(true)
                .limit(INBOX_PAGE)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| crate::error::store_error(OP, e))?;
            out.extend(page.items.unwrap_or_default());
            start = page.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() || out.len() >= DRAIN_READ {
                out.truncate(DRAIN_READ);
                return Ok(out);
            }
        }
    }
}

/// How many of `queued` (in order) one transaction commits, and how many of the plan's
/// `writes` are theirs: the writes in one chunk (see `chunk_end`), with the head and one
/// action per request for its answer within the transaction's actions; at least one
/// request (a request that [`fits`] fits alone).
fn requests_in_one_transaction(
    queued: &[Queued],
    outcomes: &[AppendOutcome],
    writes: &[Write<'_>],
) -> (usize, usize) {
    let mut best = (
        1,
        accepted(&outcomes[..queued.first().map_or(0, |q| q.entries.len())]),
    );
    let mut entries = 0;
    for (k, q) in queued.iter().enumerate() {
        entries += q.entries.len();
        let count = accepted(&outcomes[..entries]);
        let actions = if count == 0 {
            1 + (k + 1)
        } else {
            let (end, segments) = chunk_end(&writes[..count], 0);
            if end < count {
                break;
            }
            let markers = writes[..count]
                .iter()
                .filter(|w| w.entry.transaction_id.is_some())
                .count();
            1 + segments.len() + markers + (k + 1)
        };
        if actions > MAX_ACTIONS {
            break;
        }
        best = (k + 1, count);
    }
    best
}

/// How many of `outcomes` are accepted (each one write of the plan, in order).
fn accepted(outcomes: &[AppendOutcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, AppendOutcome::Accepted { .. }))
        .count()
}

/// Outcomes as stored on an answered queue item: sequences, comma-separated, a
/// duplicate's negative.
fn encode_outcomes(outcomes: &[AppendOutcome]) -> String {
    outcomes
        .iter()
        .map(|o| match o {
            AppendOutcome::Accepted { sequence } => sequence.to_string(),
            AppendOutcome::Duplicate { sequence } => format!("-{sequence}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn decode_outcomes(op: &str, text: &str, entries: usize) -> StoreResult<Vec<AppendOutcome>> {
    let outcomes: Option<Vec<AppendOutcome>> = text
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.strip_prefix('-') {
            Some(d) => d
                .parse()
                .ok()
                .map(|sequence| AppendOutcome::Duplicate { sequence }),
            None => p
                .parse()
                .ok()
                .map(|sequence| AppendOutcome::Accepted { sequence }),
        })
        .collect();
    match outcomes {
        Some(o) if o.len() == entries => Ok(o),
        _ => Err(corrupt(
            op,
            format!("queued outcomes {text:?} for {entries} entries"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::tests::entry;
    use super::*;

    fn queued(entries: Vec<NewEntry>) -> Queued {
        Queued {
            pk: String::new(),
            sk: String::new(),
            entries,
        }
    }

    #[test]
    fn only_small_appends_queue() {
        assert!(fits(&[entry(Some("a"), 400)]));
        assert!(fits(&vec![entry(None, 400); MAX_QUEUED_ENTRIES]));
        assert!(!fits(&vec![entry(None, 400); MAX_QUEUED_ENTRIES + 1]));
        assert!(!fits(&[entry(None, MAX_QUEUED_BYTES + 1)]));
    }

    #[test]
    fn outcomes_round_trip_and_are_checked_against_the_request() {
        let outcomes = vec![
            AppendOutcome::Accepted { sequence: 12 },
            AppendOutcome::Duplicate { sequence: 3 },
        ];
        let text = encode_outcomes(&outcomes);
        assert_eq!(text, "12,-3");
        assert_eq!(decode_outcomes("t", &text, 2).expect("decodes"), outcomes);
        assert!(
            decode_outcomes("t", &text, 3).is_err(),
            "one outcome per entry"
        );
        assert!(decode_outcomes("t", "12,x", 2).is_err());
    }

    #[test]
    fn the_round_read_while_one_commits_is_planned_as_if_it_committed() {
        // Four requests, the head at 5; the round in flight takes the first two (ids x
        // and y at 6 and 7). The next one, read meanwhile, leaves them out, sees x and y
        // stored even before their markers are, and moves on from 7: the second request
        // for x is a duplicate of 6.
        let sent = |sk: &str, id: &str| Queued {
            pk: String::new(),
            sk: sk.to_owned(),
            entries: vec![entry(Some(id), 300)],
        };
        let requests = vec![
            sent("Q#a", "x"),
            sent("Q#b", "y"),
            sent("Q#c", "x"),
            sent("Q#d", "z"),
        ];
        let first: Vec<NewEntry> = requests[..2]
            .iter()
            .flat_map(|q| q.entries.clone())
            .collect();
        let (_, writes) = plan(&first, &HashMap::new(), 5);
        let commits = Commits::of(&requests[..2], &writes, 7);
        assert_eq!(commits.entries, 2);
        let left = commits.left(requests);
        assert_eq!(
            left.iter().map(|q| q.sk.as_str()).collect::<Vec<_>>(),
            ["Q#c", "Q#d"]
        );
        let mut stored = HashMap::new();
        commits.stored_after(&mut stored);
        let next: Vec<NewEntry> = left.iter().flat_map(|q| q.entries.clone()).collect();
        let (outcomes, writes) = plan(&next, &stored, commits.last);
        assert_eq!(
            outcomes,
            [
                AppendOutcome::Duplicate { sequence: 6 },
                AppendOutcome::Accepted { sequence: 8 }
            ]
        );
        assert_eq!(writes.len(), 1);
    }

    #[test]
    fn a_drain_round_takes_whole_requests_within_one_transaction() {
        // 60 one-entry requests with ids: the head, one segment, and per request its
        // marker and its answer fit 49 of them (1 + 1 + 49 * 2 = 100).
        let requests: Vec<Queued> = (0..60)
            .map(|i| queued(vec![entry(Some(&format!("t{i}")), 300)]))
            .collect();
        let all: Vec<NewEntry> = requests.iter().flat_map(|q| q.entries.clone()).collect();
        let (outcomes, writes) = plan(&all, &HashMap::new(), 0);
        assert_eq!(
            requests_in_one_transaction(&requests, &outcomes, &writes),
            (49, 49)
        );
        // Without ids there are no markers: 98 requests (1 + 1 + 98).
        let requests: Vec<Queued> = (0..120).map(|_| queued(vec![entry(None, 300)])).collect();
        let all: Vec<NewEntry> = requests.iter().flat_map(|q| q.entries.clone()).collect();
        let (outcomes, writes) = plan(&all, &HashMap::new(), 0);
        assert_eq!(
            requests_in_one_transaction(&requests, &outcomes, &writes),
            (98, 98)
        );
        // A request of duplicates only writes nothing but still takes its answer; a
        // request that would split is left whole for the next round.
        let mut requests = vec![
            queued(vec![entry(Some("same"), 300)]),
            queued(vec![entry(Some("same"), 300)]),
        ];
        requests.push(queued(
            (0..40)
                .map(|i| entry(Some(&format!("u{i}")), 300))
                .collect(),
        ));
        requests.push(queued(
            (0..40)
                .map(|i| entry(Some(&format!("v{i}")), 300))
                .collect(),
        ));
        let all: Vec<NewEntry> = requests.iter().flat_map(|q| q.entries.clone()).collect();
        let (outcomes, writes) = plan(&all, &HashMap::new(), 0);
        assert_eq!(outcomes[1], AppendOutcome::Duplicate { sequence: 1 });
        // 1 head + 1 segment + 41 markers + 3 answers = 46; with the fourth request's 40
        // markers and its answer, 1 + 1 + 81 + 4 = 87: it fits too.
        assert_eq!(
            requests_in_one_transaction(&requests, &outcomes, &writes),
            (4, 81)
        );
        requests.push(queued(vec![entry(Some("w"), 300); 1]));
        requests.push(queued(
            (0..20)
                .map(|i| entry(Some(&format!("x{i}")), 300))
                .collect(),
        ));
        let all: Vec<NewEntry> = requests.iter().flat_map(|q| q.entries.clone()).collect();
        let (outcomes, writes) = plan(&all, &HashMap::new(), 0);
        // The fifth (1 marker + answer: 89) fits; the sixth (20 more markers) does not.
        assert_eq!(
            requests_in_one_transaction(&requests, &outcomes, &writes),
            (5, 82)
        );
    }

    #[test]
    fn polls_back_off_to_a_bounded_interval() {
        assert!(poll_wait(0) >= Duration::from_millis(POLL_FIRST_MS));
        assert!(poll_wait(0) < Duration::from_millis(POLL_FIRST_MS * 2));
        for poll in [10, 100, u64::MAX] {
            let wait = poll_wait(poll);
            assert!(wait >= Duration::from_millis(POLL_MAX_MS), "{wait:?}");
            assert!(
                wait <= Duration::from_millis(POLL_MAX_MS * 3 / 2),
                "{wait:?}"
            );
        }
    }
}
