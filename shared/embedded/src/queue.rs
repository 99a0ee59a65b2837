//! WorkQueue: durable queues in the `queue` table with SQS semantics, one per lane.
//!
//! Two lanes share the table (`lane` column), each a queue of its own: instance work
//! (`Lane::Process` and `Lane::Recalc`), which `WorkQueue for EmbeddedStore` receives, and
//! webhooks (`Lane::Webhooks`), which [`WebhookQueue`] receives. `send` routes every
//! message by `Message::lane()`, whichever handle it is called on.
//!
//! A message is *in flight* while it has a receipt and its `visible_at` lies in the future;
//! only then do `ack` and `retry_later` act on it. Received messages hide for the
//! visibility timeout; a message that is not acknowledged becomes visible again
//! (at-least-once). A group with a message in flight hands out nothing else (FIFO groups),
//! and within a group the oldest message comes first. `send` merges a message into a
//! pending one with the same dedupe key that was never received.
//!
//! A receive walks the lane's visible messages by (visible_at, id), the longest waiting
//! first, and hands out the oldest message of each free group it meets: two index lookups
//! per message handed out, whatever the backlog or the number of messages waiting for a
//! retry.

use std::collections::HashSet;
use std::time::Duration;

use pricing_core::model::{Lane, Message};
use pricing_core::ports::{Received, StoreError, StoreResult, WorkQueue};
use rand_core::{OsRng, RngCore};
use rusqlite::{Connection, params};
use tokio::sync::Notify;

use crate::EmbeddedStore;
use crate::db::{DbResult, duration_ms, now_ms, text};

/// The dedupe keys of queued messages that were never received, as committed: a `send`
/// finding its key here merges into that message without touching the database.
///
/// Kept exact enough to be safe: a key is added once the transaction that inserted (or
/// found) its pending message committed, and removed once the transaction of a receive that
/// hands the message out (or parks it) committed, before that receive answers; both while
/// holding the writer connection, in the order of their jobs in the group (a send and the
/// receive of its message can share one group: the send's key must not outlive the
/// receive). So while a key is here, the worker that received its message, if any, has not
/// been answered yet: it reads the log after this `send`'s entries were committed. A key
/// missing here only costs the database lookup. Assumes this process is the only one that receives from
/// the database's queue (one `standalone serve` per data directory).
#[derive(Debug, Default)]
pub(crate) struct PendingKeys(std::sync::Mutex<HashSet<String>>);

impl PendingKeys {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn contains(&self, key: &str) -> bool {
        self.keys().contains(key)
    }

    fn insert(&self, key: String) {
        self.keys().insert(key);
    }

    fn remove(&self, key: &str) {
        self.keys().remove(key);
    }

    fn clear(&self) {
        self.keys().clear();
    }
}

/// `visible_at` of a message whose body cannot be decoded: kept for inspection, never
/// handed out, and holding no group.
const PARKED: i64 = i64::MAX;

/// The queues in the `queue` table (the `lane` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueLane {
    /// ProcessInstance and Recalculate.
    Work,
    /// Deliver and Trigger.
    Webhooks,
}

impl QueueLane {
    fn of(message: &Message) -> Self {
        match message.lane() {
            Lane::Process | Lane::Recalc => QueueLane::Work,
            Lane::Webhooks => QueueLane::Webhooks,
        }
    }

    fn column(self) -> i64 {
        match self {
            QueueLane::Work => 0,
            QueueLane::Webhooks => 1,
        }
    }
}

/// The webhooks lane's queue of an [`EmbeddedStore`] (see [`EmbeddedStore::webhook_queue`]):
/// `receive`, `ack` and `retry_later` act on webhooks messages only; `send` routes by lane
/// like the store's. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WebhookQueue {
    store: EmbeddedStore,
}

impl EmbeddedStore {
    /// The queue of the webhooks lane (`Deliver`, `Trigger`), beside the instance-work lane
    /// that the store itself receives from as a `WorkQueue`.
    pub fn webhook_queue(&self) -> WebhookQueue {
        WebhookQueue {
            store: self.clone(),
        }
    }

    fn lane_notify(&self, lane: QueueLane) -> &Notify {
        match lane {
            QueueLane::Work => &self.inner.work,
            QueueLane::Webhooks => &self.inner.webhooks,
        }
    }

    async fn send_routed(&self, message: &Message) -> StoreResult<()> {
        let dedupe = message.dedupe_key();
        if self.inner.pending.contains(&dedupe) {
            // Merges into a pending message: nothing to write, and its waiters were woken
            // when it was sent.
            return Ok(());
        }
        let lane = QueueLane::of(message);
        let body =
            serde_json::to_string(message).map_err(|e| StoreError::Failed(format!("send: {e}")))?;
        let group = message.group();
        let key = dedupe.clone();
        // A group-commit job, like appends: the wake-up a submission sends right after its
        // append shares a transaction with other requests' writes.
        let inserted = crate::group::run(
                &self.inner,
                "send",
                move |tx| {
                    let pending = tx
                        .prepare_cached(
                            "SELECT 1 FROM queue WHERE dedupe_key = ?1 AND receive_count = 0 LIMIT 1",
                        )?
                        .exists(params![dedupe])?;
                    if !pending {
                        let now = now_ms();
                        tx.prepare_cached(
                            "INSERT INTO queue (lane, message_group, dedupe_key, body, sent_at, visible_at)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                        )?
                        .execute(params![lane.column(), group, dedupe, body, now])?;
                    }
                    Ok(!pending)
                },
                Some(Box::new(move |inner: &crate::Inner, _: &bool| {
                    inner.pending.insert(key);
                })),
            )
            .await?;
        if inserted {
            // A waiter registers before it looks at the queue (`wait_lane`), so a merge,
            // which changes nothing it could see, needs no wake-up.
            self.lane_notify(lane).notify_waiters();
        }
        Ok(())
    }

    // Receive, ack and retry_later are group-commit jobs like sends and appends: a worker
    // takes the writer on its own thread when it is free, without a hand-off to the
    // blocking pool and back, and shares the commit with the requests' writes.
    async fn receive_lane(
        &self,
        lane: QueueLane,
        max: usize,
        visibility: Duration,
    ) -> StoreResult<Vec<Received>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let received = crate::group::run(
            &self.inner,
            "receive",
            move |conn| receive(conn, lane, max, visibility),
            // Once committed (see `PendingKeys`): these are no longer pending.
            Some(Box::new(|inner: &crate::Inner, received: &Receipts| {
                if received.parked {
                    // Their keys are not known here; the next sends look in the database.
                    inner.pending.clear();
                }
                for r in &received.out {
                    inner.pending.remove(&r.message.dedupe_key());
                }
            })),
        )
        .await?;
        Ok(received.out)
    }

    async fn ack_lane(&self, lane: QueueLane, receipt: &str) -> StoreResult<()> {
        let receipt = receipt.to_owned();
        let deleted = crate::group::run(
            &self.inner,
            "ack",
            move |conn| {
                Ok(conn
                    .prepare_cached(ACK)?
                    .execute(params![receipt, lane.column(), now_ms()])?)
            },
            None,
        )
        .await?;
        if deleted > 0 {
            // The message's group is free again.
            self.lane_notify(lane).notify_waiters();
        }
        Ok(())
    }

    async fn retry_later_lane(
        &self,
        lane: QueueLane,
        receipt: &str,
        delay: Duration,
    ) -> StoreResult<()> {
        let receipt = receipt.to_owned();
        let changed = crate::group::run(
            &self.inner,
            "retry_later",
            move |conn| {
                let now = now_ms();
                Ok(conn.prepare_cached(RETRY_LATER)?.execute(params![
                    receipt,
                    now.saturating_add(duration_ms(delay)),
                    lane.column(),
                    now
                ])?)
            },
            None,
        )
        .await?;
        if changed > 0 {
            self.lane_notify(lane).notify_waiters();
        }
        Ok(())
    }

    async fn release_lane(&self, lane: QueueLane) -> StoreResult<usize> {
        let released = self
            .on_writer("release_in_flight", move |conn| {
                let now = now_ms();
                Ok(conn
                    .prepare_cached(
                        "UPDATE queue SET receipt = NULL, visible_at = ?1
                         WHERE lane = ?3 AND receipt IS NOT NULL AND delayed = 0
                           AND visible_at > ?1 AND visible_at < ?2",
                    )?
                    .execute(params![now, PARKED, lane.column()])?)
            })
            .await?;
        if released > 0 {
            self.lane_notify(lane).notify_waiters();
        }
        Ok(released)
    }

    async fn wait_lane(&self, lane: QueueLane, max_wait: Duration) {
        let notified = self.lane_notify(lane).notified();
        tokio::pin!(notified);
        // Registered before looking, so a send in between is not missed.
        notified.as_mut().enable();
        // Two index lookups: on this thread when a connection is free.
        let readiness = match self
            .on_reader_inline("wait_for_work", move |conn| readiness(conn, lane))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look at the queue; waiting");
                Readiness::Idle
            }
        };
        let wait = match readiness {
            Readiness::Now => return,
            Readiness::At(at) => {
                let ms = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                max_wait.min(Duration::from_millis(ms))
            }
            Readiness::Idle => max_wait,
        };
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }

    /// Makes every message in flight on the instance-work lane visible again at once. For a
    /// process that owns the database alone (standalone) at start-up: messages in flight
    /// then belong to a process that died, and waiting out their visibility would hold
    /// their groups for nothing. Messages hidden by `retry_later` keep their delay.
    /// Returns how many were released. (The webhooks lane: [`WebhookQueue::release_in_flight`].)
    pub async fn release_in_flight(&self) -> StoreResult<usize> {
        self.release_lane(QueueLane::Work).await
    }

    /// Waits until the instance-work lane may have work: returns at once when a message is
    /// receivable, early when something is sent to the lane (or a group is freed) in this
    /// process or when an in-flight message's visibility runs out, and at the latest after
    /// `max_wait`. A worker loop calls it when `receive` came back empty. (The webhooks
    /// lane: [`WebhookQueue::wait_for_work`].)
    pub async fn wait_for_work(&self, max_wait: Duration) {
        self.wait_lane(QueueLane::Work, max_wait).await;
    }
}

impl WorkQueue for EmbeddedStore {
    /// Routes by `message.lane()`: webhooks messages go to the webhooks lane.
    async fn send(&self, message: &Message) -> StoreResult<()> {
        self.send_routed(message).await
    }

    async fn receive(&self, max: usize, visibility: Duration) -> StoreResult<Vec<Received>> {
        self.receive_lane(QueueLane::Work, max, visibility).await
    }

    async fn ack(&self, receipt: &str) -> StoreResult<()> {
        self.ack_lane(QueueLane::Work, receipt).await
    }

    async fn retry_later(&self, receipt: &str, delay: Duration) -> StoreResult<()> {
        self.retry_later_lane(QueueLane::Work, receipt, delay).await
    }
}

impl WebhookQueue {
    /// [`EmbeddedStore::wait_for_work`] for the webhooks lane.
    pub async fn wait_for_work(&self, max_wait: Duration) {
        self.store.wait_lane(QueueLane::Webhooks, max_wait).await;
    }

    /// [`EmbeddedStore::release_in_flight`] for the webhooks lane: deliveries waiting for a
    /// retry keep waiting.
    pub async fn release_in_flight(&self) -> StoreResult<usize> {
        self.store.release_lane(QueueLane::Webhooks).await
    }

    /// The store this queue lives in.
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }
}

impl WorkQueue for WebhookQueue {
    /// Routes by `message.lane()`, like the store's `send`.
    async fn send(&self, message: &Message) -> StoreResult<()> {
        self.store.send_routed(message).await
    }

    async fn receive(&self, max: usize, visibility: Duration) -> StoreResult<Vec<Received>> {
        self.store
            .receive_lane(QueueLane::Webhooks, max, visibility)
            .await
    }

    async fn ack(&self, receipt: &str) -> StoreResult<()> {
        self.store.ack_lane(QueueLane::Webhooks, receipt).await
    }

    async fn retry_later(&self, receipt: &str, delay: Duration) -> StoreResult<()> {
        self.store
            .retry_later_lane(QueueLane::Webhooks, receipt, delay)
            .await
    }
}

/// Deletes an in-flight message by its receipt (the receipt's unique index).
pub(crate) const ACK: &str =
    "DELETE FROM queue WHERE receipt = ?1 AND +lane = ?2 AND +visible_at > ?3";
/// Hides an in-flight message until a time, keeping its group (the receipt's unique index).
pub(crate) const RETRY_LATER: &str = "UPDATE queue SET visible_at = ?2, delayed = 1
     WHERE receipt = ?1 AND +lane = ?3 AND +visible_at > ?4";
/// A lane's visible messages, longest waiting first (index `queue_ready`).
pub(crate) const CANDIDATES: &str = "SELECT message_group FROM queue
     WHERE lane = ?1 AND visible_at <= ?2 ORDER BY visible_at, id";
/// Whether a group has a message in flight (partial index `queue_in_flight`; `+lane` keeps
/// the planner off `queue_ready`, whose range would cover every hidden message).
pub(crate) const IN_FLIGHT: &str = "SELECT 1 FROM queue WHERE message_group = ?1
     AND receipt IS NOT NULL AND visible_at > ?2 AND +lane = ?3";
/// A group's oldest visible message (index `queue_by_group`; the `+` keep the planner off
/// `queue_ready`).
pub(crate) const OLDEST_OF_GROUP: &str = "SELECT id, body, receive_count FROM queue
     WHERE message_group = ?1 AND +lane = ?2 AND +visible_at <= ?3 ORDER BY id LIMIT 1";
/// Whether a lane has a visible message in a free group.
pub(crate) const READY: &str = "SELECT EXISTS (
     SELECT 1 FROM queue q WHERE q.lane = ?2 AND q.visible_at <= ?1 AND NOT EXISTS (
         SELECT 1 FROM queue f WHERE f.message_group = q.message_group
         AND f.receipt IS NOT NULL AND f.visible_at > ?1 AND +f.lane = ?2))";
/// When a lane's next hidden message shows again (index `queue_ready`).
pub(crate) const NEXT_VISIBLE: &str = "SELECT visible_at FROM queue
     WHERE lane = ?2 AND visible_at > ?1 AND visible_at < ?3 ORDER BY visible_at LIMIT 1";

/// What a receive handed out, and whether it parked messages that do not decode.
struct Receipts {
    out: Vec<Received>,
    parked: bool,
}

/// Inside the caller's transaction (a group commit's).
fn receive(
    tx: &Connection,
    lane: QueueLane,
    max: usize,
    visibility: Duration,
) -> DbResult<Receipts> {
    let now = now_ms();
    let hidden_until = now.saturating_add(duration_ms(visibility).max(1));
    let lane = lane.column();
    let mut out = Vec::new();
    let mut picked: Vec<(i64, String, u32)> = Vec::new();
    let mut parked: Vec<i64> = Vec::new();
    {
        let mut candidates = tx.prepare_cached(CANDIDATES)?;
        let mut in_flight = tx.prepare_cached(IN_FLIGHT)?;
        let mut oldest = tx.prepare_cached(OLDEST_OF_GROUP)?;
        // Groups met so far: each hands out at most one message.
        let mut seen: HashSet<String> = HashSet::new();
        let mut rows = candidates.query(params![lane, now])?;
        while let Some(row) = rows.next()? {
            let group = text(row, 0)?;
            if seen.contains(group) {
                continue;
            }
            seen.insert(group.to_owned());
            if in_flight.exists(params![group, now, lane])? {
                continue;
            }
            let mut first = oldest.query(params![group, lane, now])?;
            let Some(first) = first.next()? else {
                continue;
            };
            let id: i64 = first.get(0)?;
            let message: Message = match serde_json::from_str(text(first, 1)?) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(id, error = %e, "queue message does not decode; parked");
                    parked.push(id);
                    continue;
                }
            };
            let count: i64 = first.get(2)?;
            let count = u32::try_from(count + 1).unwrap_or(u32::MAX);
            let receipt = new_receipt();
            picked.push((id, receipt.clone(), count));
            out.push(Received {
                receipt,
                message,
                receive_count: count,
            });
            if out.len() == max {
                break;
            }
        }
    }
    {
        let mut update = tx.prepare_cached(
            "UPDATE queue SET receipt = ?2, visible_at = ?3, receive_count = ?4, delayed = 0
             WHERE id = ?1",
        )?;
        for (id, receipt, count) in &picked {
            update.execute(params![id, receipt, hidden_until, count])?;
        }
        let mut park = tx.prepare_cached(
            "UPDATE queue SET receipt = NULL, visible_at = ?2, receive_count = receive_count + 1
             WHERE id = ?1",
        )?;
        for id in &parked {
            park.execute(params![id, PARKED])?;
        }
    }
    Ok(Receipts {
        out,
        parked: !parked.is_empty(),
    })
}

/// 128 random bits, hex.
fn new_receipt() -> String {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    let mut out = String::with_capacity(32);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// When a lane may next have something to hand out.
enum Readiness {
    Now,
    At(i64),
    Idle,
}

fn readiness(conn: &mut Connection, lane: QueueLane) -> DbResult<Readiness> {
    let now = now_ms();
    let lane = lane.column();
    let ready: bool = conn
        .prepare_cached(READY)?
        .query_row(params![now, lane], |r| r.get(0))?;
    if ready {
        return Ok(Readiness::Now);
    }
    // Hidden messages (in flight or delayed) by when they show again; parked ones never do.
    let mut stmt = conn.prepare_cached(NEXT_VISIBLE)?;
    let mut rows = stmt.query(params![now, lane, PARKED])?;
    Ok(match rows.next()? {
        Some(row) => Readiness::At(row.get(0)?),
        None => Readiness::Idle,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pricing_contract::fixtures::Run;
    use pricing_core::model::Message;
    use pricing_core::ports::WorkQueue;

    /// A send and the receive that hands its message out can share one group commit; the
    /// send's pending key must not outlive that receive, or every later send of the key
    /// would merge into a message already handed out and the instance would never be
    /// woken again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_send_and_the_receive_of_its_message_in_one_group_leave_no_pending_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::EmbeddedStore::open(&dir.path().join("pricing.db")).unwrap();
        let message = Message::ProcessInstance {
            key: Run::new("pending").key("p", "i"),
        };
        // A job holds the writer until the send and the receive are queued behind it.
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let gate = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .in_group("gate", move |_| {
                        started_tx.send(()).unwrap();
                        released.recv().unwrap();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();
        let send = tokio::spawn({
            let (store, message) = (store.clone(), message.clone());
            async move { store.send(&message).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let receive = tokio::spawn({
            let store = store.clone();
            async move { store.receive(10, Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(()).unwrap();
        gate.await.unwrap().unwrap();
        send.await.unwrap().unwrap();
        let received = receive.await.unwrap().unwrap();
        assert_eq!(received.len(), 1, "the receive saw the send before it");
        store.ack(&received[0].receipt).await.unwrap();
        // The next send of the same key is a new message, not merged into the one above.
        store.send(&message).await.unwrap();
        let again = store.receive(10, Duration::from_secs(60)).await.unwrap();
        assert_eq!(again.len(), 1, "the second send was lost");
        assert_eq!(again[0].message, message);
    }
}
