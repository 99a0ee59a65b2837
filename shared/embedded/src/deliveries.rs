//! DeliveryStore: one row per webhook id. The event (possibly a 1,000-price part) is kept
//! in a column of its own and the rest of the delivery in `record` with the event's data
//! left out, so that an attempt or a client report rewrites a record of a few hundred
//! bytes, and the listing reads the records only (a summary keeps the event's id, which
//! the record has). `due_at` (the next attempt's time while not final) feeds the overdue
//! sweep; `postpone` moves it and the record's `nextAttemptAt` together in one UPDATE.

use pricing_core::ids::{ProjectKey, SubscriptionId};
use pricing_core::model::{Event, Page, PageRequest};
use pricing_core::ports::{DeliveryStore, StoreError, StoreResult};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::MAX_CLIENT_REPORTS;
use pricing_core::webhooks::{AttemptUpdate, ClientReport, Delivery, DeliverySummary};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use crate::EmbeddedStore;
use crate::db::{DbResult, text};
use crate::projects::{fetch_limit, page_of};

impl DeliveryStore for EmbeddedStore {
    async fn create_deliveries(&self, deliveries: &[Delivery]) -> StoreResult<Vec<String>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let rows = deliveries
            .iter()
            .map(Row::new)
            .collect::<serde_json::Result<Vec<_>>>()
            .map_err(|e| StoreError::Failed(format!("create_deliveries: {e}")))?;
        self.on_writer("create_deliveries", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut created = Vec::new();
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO deliveries
                     (webhook_id, project_id, subscription_id, created_at, due_at, record, event)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (webhook_id) DO NOTHING",
                )?;
                for r in rows {
                    let n = insert.execute(params![
                        r.webhook_id,
                        r.project_id,
                        r.subscription_id,
                        r.created_at,
                        r.due_at,
                        r.record,
                        r.event
                    ])?;
                    if n > 0 {
                        created.push(r.webhook_id);
                    }
                }
            }
            tx.commit()?;
            Ok(created)
        })
        .await
    }

    async fn get_delivery(&self, webhook_id: &str) -> StoreResult<Option<Delivery>> {
        let id = webhook_id.to_owned();
        self.on_reader("get_delivery", move |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT record, event FROM deliveries WHERE webhook_id = ?1")?;
            let mut rows = stmt.query(params![id])?;
            match rows.next()? {
                None => Ok(None),
                Some(row) => Ok(Some(whole(text(row, 0)?, text(row, 1)?)?)),
            }
        })
        .await
    }

    async fn record_attempt(&self, webhook_id: &str, update: &AttemptUpdate) -> StoreResult<bool> {
        let id = webhook_id.to_owned();
        let update = update.clone();
        self.on_writer("record_attempt", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut d = lean(&tx, &id)?.ok_or(StoreError::NotFound)?;
            if d.status.is_final() || d.attempt.checked_add(1) != Some(update.attempt) {
                return Ok(false);
            }
            update.apply(&mut d);
            rewrite(&tx, &d)?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn add_client_report(&self, webhook_id: &str, report: &ClientReport) -> StoreResult<()> {
        let id = webhook_id.to_owned();
        let report = report.clone();
        self.on_writer("add_client_report", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut d = lean(&tx, &id)?.ok_or(StoreError::NotFound)?;
            if d.client_reports.len() < MAX_CLIENT_REPORTS {
                d.client_reports.push(report);
                rewrite(&tx, &d)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn list_deliveries(
        &self,
        project: &ProjectKey,
        subscription: &SubscriptionId,
        page: &PageRequest,
    ) -> StoreResult<Page<DeliverySummary>> {
        let project = project.storage_key();
        let subscription = subscription.to_string();
        let cursor = page.cursor.clone();
        let limit = page.limit;
        self.on_reader("list_deliveries", move |conn| {
            // The cursor is the last listed webhook id; the page continues before its
            // (created_at, webhook id).
            let before = match cursor {
                // Before every stored delivery.
                None => (i64::MAX, String::new()),
                Some(id) => {
                    let created: i64 = conn
                        .prepare_cached(
                            "SELECT created_at FROM deliveries
                             WHERE webhook_id = ?1 AND project_id = ?2 AND subscription_id = ?3",
                        )?
                        .query_row(params![id, project, subscription], |r| r.get(0))
                        .optional()?
                        // Not a cursor this listing handed out.
                        .ok_or(StoreError::NotFound)?;
                    (created, id)
                }
            };
            // Newest first; ties (one dispatch creates many at once) by webhook id, so that
            // the cursor is exact.
            let mut stmt = conn.prepare_cached(LIST_PAGE)?;
            let mut rows = stmt.query(params![
                project,
                subscription,
                before.0,
                before.1,
                fetch_limit(limit)
            ])?;
            // The records only: a summary needs the event's id, not its data.
            let mut items = Vec::new();
            while let Some(row) = rows.next()? {
                let lean: Delivery = serde_json::from_str(text(row, 0)?)?;
                items.push(lean.summary());
            }
            Ok(page_of(items, limit, |d: &DeliverySummary| {
                d.webhook_id.clone()
            }))
        })
        .await
    }

    async fn postpone(
        &self,
        webhook_id: &str,
        due: Timestamp,
        until: Timestamp,
    ) -> StoreResult<bool> {
        let id = webhook_id.to_owned();
        self.on_writer("postpone", move |conn| {
            // `due_at` is not null while the delivery is not final; the record's due time
            // is compared too (exactly: `due_at` has milliseconds only, and is the
            // creation time of a delivery without a next attempt).
            let changed = conn.prepare_cached(POSTPONE)?.execute(params![
                id,
                due.millis(),
                due.to_rfc3339(),
                until.millis(),
                until.to_rfc3339()
            ])?;
            if changed > 0 {
                return Ok(true);
            }
            let exists = conn
                .prepare_cached("SELECT 1 FROM deliveries WHERE webhook_id = ?1")?
                .query_row(params![id], |_| Ok(()))
                .optional()?
                .is_some();
            if exists {
                Ok(false)
            } else {
                Err(StoreError::NotFound.into())
            }
        })
        .await
    }

    async fn overdue_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        let before = before.millis();
        self.on_reader("overdue_deliveries", move |conn| {
            let mut stmt = conn.prepare_cached(OVERDUE)?;
            let mut rows = stmt.query(params![before, i64::try_from(limit).unwrap_or(i64::MAX)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(text(row, 0)?.to_owned());
            }
            Ok(out)
        })
        .await
    }
}

/// A page of one (project, subscription)'s delivery records (not their events) before a
/// (created_at, webhook id), newest first (index `deliveries_by_subscription`, walked backwards).
pub(crate) const LIST_PAGE: &str = "SELECT record FROM deliveries
     WHERE project_id = ?1 AND subscription_id = ?2 AND (created_at, webhook_id) < (?3, ?4)
     ORDER BY created_at DESC, webhook_id DESC LIMIT ?5";

/// Open deliveries due before a time, oldest due first (partial index `deliveries_due`).
pub(crate) const OVERDUE: &str = "SELECT webhook_id FROM deliveries WHERE due_at < ?1
     ORDER BY due_at, webhook_id LIMIT ?2";

/// Moves an open delivery's next attempt (record and `due_at`) if it is still the one
/// given.
const POSTPONE: &str = "UPDATE deliveries
     SET record = json_set(record, '$.nextAttemptAt', ?5), due_at = ?4
     WHERE webhook_id = ?1 AND due_at = ?2 AND json_extract(record, '$.nextAttemptAt') = ?3";

/// A delivery as its columns.
struct Row {
    webhook_id: String,
    project_id: String,
    subscription_id: String,
    created_at: i64,
    due_at: Option<i64>,
    record: String,
    event: String,
}

impl Row {
    fn new(d: &Delivery) -> serde_json::Result<Self> {
        Ok(Row {
            webhook_id: d.webhook_id.clone(),
            project_id: d.project().storage_key(),
            subscription_id: d.subscription_id.to_string(),
            created_at: d.created_at.millis(),
            due_at: due_at(d),
            record: lean_record(d)?,
            event: serde_json::to_string(&d.event)?,
        })
    }
}

/// When the sweep should look at a delivery: its next attempt while it is not final (its
/// creation if it somehow has no next attempt, so that nothing open is forgotten).
fn due_at(d: &Delivery) -> Option<i64> {
    if d.status.is_final() {
        None
    } else {
        Some(d.next_attempt_at.unwrap_or(d.created_at).millis())
    }
}

/// What `record` holds: the delivery with its event's data left out (`null`). Every field
/// is named, so a field added to `Delivery` does not go unstored unnoticed.
fn lean_record(d: &Delivery) -> serde_json::Result<String> {
    let Delivery {
        webhook_id,
        subscription_id,
        tenant,
        project_id,
        instance_id,
        event_type,
        created_at,
        attempt,
        status,
        response_status,
        error,
        attempted_at,
        next_attempt_at,
        attempts,
        client_reports,
        event,
    } = d;
    let Event {
        id,
        event_type: type_of_event,
        project_id: event_project,
        instance_id: event_instance,
        created_at: event_created,
        data: _,
    } = event;
    serde_json::to_string(&Delivery {
        webhook_id: webhook_id.clone(),
        subscription_id: subscription_id.clone(),
        tenant: tenant.clone(),
        project_id: project_id.clone(),
        instance_id: instance_id.clone(),
        event_type: event_type.clone(),
        created_at: *created_at,
        attempt: *attempt,
        status: *status,
        response_status: *response_status,
        error: error.clone(),
        attempted_at: *attempted_at,
        next_attempt_at: *next_attempt_at,
        attempts: attempts.clone(),
        client_reports: client_reports.clone(),
        event: Event {
            id: id.clone(),
            event_type: type_of_event.clone(),
            project_id: event_project.clone(),
            instance_id: event_instance.clone(),
            created_at: *event_created,
            data: Value::Null,
        },
    })
}

/// The delivery from its record and its event.
fn whole(record: &str, event: &str) -> DbResult<Delivery> {
    let mut d: Delivery = serde_json::from_str(record)?;
    d.event = serde_json::from_str(event)?;
    Ok(d)
}

/// The stored delivery without its event's data (enough to judge and change it).
fn lean(conn: &Connection, webhook_id: &str) -> DbResult<Option<Delivery>> {
    let record: Option<String> = conn
        .prepare_cached("SELECT record FROM deliveries WHERE webhook_id = ?1")?
        .query_row(params![webhook_id], |r| r.get(0))
        .optional()?;
    Ok(record.map(|r| serde_json::from_str(&r)).transpose()?)
}

/// Writes back the mutable part of a delivery read with [`lean`].
fn rewrite(conn: &Connection, d: &Delivery) -> DbResult<()> {
    conn.prepare_cached("UPDATE deliveries SET record = ?2, due_at = ?3 WHERE webhook_id = ?1")?
        .execute(params![d.webhook_id, serde_json::to_string(d)?, due_at(d)])?;
    Ok(())
}
