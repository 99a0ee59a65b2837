//! WorkQueue: a durable queue in the `queue` table with SQS semantics.
//!
//! A message is *in flight* while it has a receipt and its `visible_at` lies in the future;
//! only then do `ack` and `retry_later` act on it. Received messages hide for the
//! visibility timeout; a message that is not acknowledged becomes visible again
//! (at-least-once). A group with a message in flight hands out nothing else (FIFO groups),
//! and within a group the oldest message comes first. `send` merges a message into a
//! pending one with the same dedupe key that was never received.

use std::collections::HashSet;
use std::time::Duration;

use pricing_core::model::Message;
use pricing_core::ports::{Received, StoreError, StoreResult, WorkQueue};
use rand_core::{OsRng, RngCore};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, duration_ms, now_ms, text};

/// `visible_at` of a message whose body cannot be decoded: kept for inspection, never
/// handed out, and holding no group.
const PARKED: i64 = i64::MAX;

impl WorkQueue for EmbeddedStore {
    async fn send(&self, message: &Message) -> StoreResult<()> {
        let body =
            serde_json::to_string(message).map_err(|e| StoreError::Failed(format!("send: {e}")))?;
        let group = message.group();
        let dedupe = message.dedupe_key();
        self.on_writer("send", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let pending: Option<i64> = tx
                .prepare_cached(
                    "SELECT id FROM queue WHERE dedupe_key = ?1 AND receive_count = 0 LIMIT 1",
                )?
                .query_row(params![dedupe], |r| r.get(0))
                .optional()?;
            if pending.is_none() {
                let now = now_ms();
                tx.prepare_cached(
                    "INSERT INTO queue (message_group, dedupe_key, body, sent_at, visible_at)
                     VALUES (?1, ?2, ?3, ?4, ?4)",
                )?
                .execute(params![group, dedupe, body, now])?;
            }
            tx.commit()?;
            Ok(())
        })
        .await?;
        self.inner.work.notify_waiters();
        Ok(())
    }

    async fn receive(&self, max: usize, visibility: Duration) -> StoreResult<Vec<Received>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.on_writer("receive", move |conn| receive(conn, max, visibility))
            .await
    }

    async fn ack(&self, receipt: &str) -> StoreResult<()> {
        let receipt = receipt.to_owned();
        let deleted = self
            .on_writer("ack", move |conn| {
                Ok(conn
                    .prepare_cached("DELETE FROM queue WHERE receipt = ?1 AND visible_at > ?2")?
                    .execute(params![receipt, now_ms()])?)
            })
            .await?;
        if deleted > 0 {
            // The message's group is free again.
            self.inner.work.notify_waiters();
        }
        Ok(())
    }

    async fn retry_later(&self, receipt: &str, delay: Duration) -> StoreResult<()> {
        let receipt = receipt.to_owned();
        let changed = self
            .on_writer("retry_later", move |conn| {
                let now = now_ms();
                Ok(conn
                    .prepare_cached(
                        "UPDATE queue SET visible_at = ?2 WHERE receipt = ?1 AND visible_at > ?3",
                    )?
                    .execute(params![
                        receipt,
                        now.saturating_add(duration_ms(delay)),
                        now
                    ])?)
            })
            .await?;
        if changed > 0 {
            self.inner.work.notify_waiters();
        }
        Ok(())
    }
}

fn receive(conn: &mut Connection, max: usize, visibility: Duration) -> DbResult<Vec<Received>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_ms();
    let hidden_until = now.saturating_add(duration_ms(visibility).max(1));
    let mut out = Vec::new();
    {
        let mut busy: HashSet<String> = HashSet::new();
        let mut stmt = tx.prepare_cached(
            "SELECT DISTINCT message_group FROM queue WHERE receipt IS NOT NULL AND visible_at > ?1",
        )?;
        let mut rows = stmt.query(params![now])?;
        while let Some(row) = rows.next()? {
            busy.insert(text(row, 0)?.to_owned());
        }
        let mut picked: Vec<(i64, String, u32)> = Vec::new();
        let mut parked: Vec<i64> = Vec::new();
        let mut stmt = tx.prepare_cached(
            "SELECT id, message_group, body, receive_count FROM queue
             WHERE visible_at <= ?1 ORDER BY id",
        )?;
        let mut rows = stmt.query(params![now])?;
        while let Some(row) = rows.next()? {
            let group = text(row, 1)?;
            if busy.contains(group) {
                continue;
            }
            let id: i64 = row.get(0)?;
            let message: Message = match serde_json::from_str(text(row, 2)?) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(id, error = %e, "queue message does not decode; parked");
                    parked.push(id);
                    continue;
                }
            };
            busy.insert(group.to_owned());
            let count: i64 = row.get(3)?;
            let receipt = new_receipt();
            picked.push((
                id,
                receipt.clone(),
                u32::try_from(count + 1).unwrap_or(u32::MAX),
            ));
            out.push(Received {
                receipt,
                message,
                receive_count: u32::try_from(count + 1).unwrap_or(u32::MAX),
            });
            if out.len() == max {
                break;
            }
        }
        drop(rows);
        let mut update = tx.prepare_cached(
            "UPDATE queue SET receipt = ?2, visible_at = ?3, receive_count = ?4 WHERE id = ?1",
        )?;
        for (id, receipt, count) in &picked {
            update.execute(params![id, receipt, hidden_until, count])?;
        }
        let mut park = tx.prepare_cached(
            "UPDATE queue SET receipt = NULL, visible_at = ?2, receive_count = receive_count + 1
             WHERE id = ?1",
        )?;
        for id in parked {
            park.execute(params![id, PARKED])?;
        }
    }
    tx.commit()?;
    Ok(out)
}

/// 128 random bits, hex.
fn new_receipt() -> String {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When the queue may next have something to hand out.
enum Readiness {
    Now,
    At(i64),
    Idle,
}

impl EmbeddedStore {
    /// Makes every in-flight message visible again at once. For a process that owns the
    /// database alone (standalone) at start-up: messages in flight then belong to a process
    /// that died, and waiting out their visibility would hold their groups for nothing.
    /// Returns how many were released.
    pub async fn release_in_flight(&self) -> StoreResult<usize> {
        let released = self
            .on_writer("release_in_flight", |conn| {
                let now = now_ms();
                Ok(conn
                    .prepare_cached(
                        "UPDATE queue SET receipt = NULL, visible_at = ?1
                         WHERE receipt IS NOT NULL AND visible_at > ?1 AND visible_at < ?2",
                    )?
                    .execute(params![now, PARKED])?)
            })
            .await?;
        if released > 0 {
            self.inner.work.notify_waiters();
        }
        Ok(released)
    }

    /// Waits until the queue may have work: returns at once when a message is receivable,
    /// early when something is sent (or a group is freed) in this process or when an
    /// in-flight message's visibility runs out, and at the latest after `max_wait`.
    /// A worker loop calls it when `receive` came back empty.
    pub async fn wait_for_work(&self, max_wait: Duration) {
        let notified = self.inner.work.notified();
        tokio::pin!(notified);
        // Registered before looking, so a send in between is not missed.
        notified.as_mut().enable();
        let readiness = match self.on_reader("wait_for_work", readiness).await {
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
}

fn readiness(conn: &mut Connection) -> DbResult<Readiness> {
    let now = now_ms();
    let ready: bool = conn
        .prepare_cached(
            "SELECT EXISTS (
                SELECT 1 FROM queue q WHERE q.visible_at <= ?1 AND NOT EXISTS (
                    SELECT 1 FROM queue f WHERE f.message_group = q.message_group
                    AND f.receipt IS NOT NULL AND f.visible_at > ?1))",
        )?
        .query_row(params![now], |r| r.get(0))?;
    if ready {
        return Ok(Readiness::Now);
    }
    let next: Option<i64> = conn
        .prepare_cached(
            "SELECT MIN(visible_at) FROM queue
             WHERE receipt IS NOT NULL AND visible_at > ?1 AND visible_at < ?2",
        )?
        .query_row(params![now, PARKED], |r| r.get(0))?;
    Ok(next.map_or(Readiness::Idle, Readiness::At))
}
