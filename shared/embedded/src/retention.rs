//! The pruning step of the retention policy (`pricing_core::retention`): the standalone's
//! scheduler calls [`EmbeddedStore::prune`] every tick. The entry log is never pruned.
//!
//! Each call does one bounded pass: every class deletes at most `batch` rows, each in
//! short write transactions of its own (one per instance for prices), and the candidates
//! are found on a reader first, so appends wait for at most one small transaction. A
//! pass that hit its bound says so (`more`); the caller runs the next pass after yielding.
//!
//! What is never pruned, whatever its age:
//! - the latest calculation of an instance (`price_latest`, its `price_calculations` row
//!   and its `price_history` rows: the current prices);
//! - each item's latest history row, whatever its age: it explains the item's current
//!   price (a calculation that leaves a price as it was writes no history row);
//! - a calculation's row while history rows refer to it (a history entry names its
//!   calculation), so a calculation row goes at the later of the two retentions;
//! - events not dispatched yet (after the instance's outbox mark in `event_heads`);
//! - deliveries that are not final (`due_at` set: pending or retrying).

use pricing_core::ports::StoreResult;
use pricing_core::retention::{Class, Retention};
use pricing_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::EmbeddedStore;
use crate::db::{DbResult, text};

/// Version 8 (retention): final deliveries by creation time (the pruning step's scan),
/// and each item's history rows by sequence (whether a later row of the item exists: an
/// item's latest history row is never pruned).
pub(crate) const SCHEMA_V8: &str = r#"
CREATE INDEX IF NOT EXISTS deliveries_final ON deliveries (created_at, webhook_id) WHERE due_at IS NULL;
CREATE INDEX IF NOT EXISTS price_history_by_item ON price_history (project_id, instance_id, item_id, seq);
"#;

/// Instances read per page of the price pass.
const INSTANCE_PAGE: i64 = 200;

/// What one pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Calculation rows (not the latest of their instance).
    pub calculations: usize,
    /// Price history rows.
    pub history: usize,
    /// Final deliveries.
    pub deliveries: usize,
    /// Dispatched events.
    pub events: usize,
    /// A class stopped at the bound with more past retention: run another pass.
    pub more: bool,
}

impl PruneReport {
    pub fn total(&self) -> usize {
        self.calculations + self.history + self.deliveries + self.events
    }
}

/// Final deliveries created before a time, oldest first (partial index `deliveries_final`).
pub(crate) const FINAL_DELIVERIES: &str = "SELECT webhook_id FROM deliveries
     WHERE due_at IS NULL AND created_at < ?1
     ORDER BY created_at, webhook_id LIMIT ?2";

/// Dispatched events after a position, in creation order, with their creation time.
pub(crate) const DISPATCHED_EVENTS: &str = "SELECT e.pos, json_extract(e.record, '$.createdAt')
     FROM events e
     JOIN event_heads h ON h.project_id = e.project_id AND h.instance_id = e.instance_id
     WHERE e.pos > ?1 AND e.pos <= h.dispatched_pos
     ORDER BY e.pos LIMIT ?2";

impl EmbeddedStore {
    /// One bounded pass of the retention policy at `now` (see the module documentation):
    /// at most `batch` rows per class. Classes kept for ever are not looked at.
    pub async fn prune(
        &self,
        policy: &Retention,
        now: Timestamp,
        batch: usize,
    ) -> StoreResult<PruneReport> {
        let batch = batch.max(1);
        let mut report = PruneReport::default();
        if let Some(cutoff) = policy.cutoff(Class::Deliveries, now) {
            let n = self.prune_deliveries(cutoff, batch).await?;
            report.deliveries = n;
            report.more |= n == batch;
        }
        if let Some(cutoff) = policy.cutoff(Class::Events, now) {
            let n = self.prune_events(cutoff, batch).await?;
            report.events = n;
            report.more |= n == batch;
        }
        let calculations = policy.cutoff(Class::Calculations, now);
        let history = policy.cutoff(Class::PriceHistory, now);
        if calculations.is_some() || history.is_some() {
            self.prune_prices(calculations, history, batch, &mut report)
                .await?;
        }
        Ok(report)
    }

    async fn prune_deliveries(&self, cutoff: Timestamp, batch: usize) -> StoreResult<usize> {
        let limit = i64::try_from(batch).unwrap_or(i64::MAX);
        let ids: Vec<String> = self
            .on_reader("prune deliveries", move |conn| {
                let mut stmt = conn.prepare_cached(FINAL_DELIVERIES)?;
                let mut rows = stmt.query(params![cutoff.millis(), limit])?;
                let mut ids = Vec::new();
                while let Some(row) = rows.next()? {
                    ids.push(text(row, 0)?.to_owned());
                }
                Ok(ids)
            })
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        self.on_writer("prune deliveries", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut n = 0;
            {
                // Checked again under the write lock: still final, still old.
                let mut delete = tx.prepare_cached(
                    "DELETE FROM deliveries
                     WHERE webhook_id = ?1 AND due_at IS NULL AND created_at < ?2",
                )?;
                for id in &ids {
                    n += delete.execute(params![id, cutoff.millis()])?;
                }
            }
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    async fn prune_events(&self, cutoff: Timestamp, batch: usize) -> StoreResult<usize> {
        let limit = i64::try_from(batch).unwrap_or(i64::MAX);
        let positions: Vec<i64> = self
            .on_reader("prune events", move |conn| {
                let mut stmt = conn.prepare_cached(DISPATCHED_EVENTS)?;
                let mut rows = stmt.query(params![0, limit])?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let created = row
                        .get_ref(1)?
                        .as_str_or_null()
                        .ok()
                        .flatten()
                        .and_then(Timestamp::parse);
                    match created {
                        // Positions follow creation: the first recent one ends the pass.
                        Some(t) if t >= cutoff => break,
                        Some(_) => out.push(row.get(0)?),
                        None => {
                            tracing::warn!(
                                pos = row.get::<_, i64>(0)?,
                                "an event without a creation time is kept"
                            );
                        }
                    }
                }
                Ok(out)
            })
            .await?;
        if positions.is_empty() {
            return Ok(0);
        }
        self.on_writer("prune events", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut n = 0;
            {
                // The outbox mark only moves forward: dispatched stays dispatched.
                let mut delete = tx.prepare_cached(
                    "DELETE FROM events WHERE pos = ?1 AND pos <= (
                         SELECT h.dispatched_pos FROM event_heads h
                         WHERE h.project_id = events.project_id
                           AND h.instance_id = events.instance_id)",
                )?;
                for pos in &positions {
                    n += delete.execute(params![pos])?;
                }
            }
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    /// Calculations and price history, instance by instance.
    async fn prune_prices(
        &self,
        calculations: Option<Timestamp>,
        history: Option<Timestamp>,
        batch: usize,
        report: &mut PruneReport,
    ) -> StoreResult<()> {
        let mut after = (String::new(), String::new());
        loop {
            let from = after.clone();
            let instances: Vec<(String, String, i64)> = self
                .on_reader("prune prices", move |conn| {
                    let mut stmt = conn.prepare_cached(
                        "SELECT project_id, instance_id, seq FROM price_latest
                         WHERE (project_id, instance_id) > (?1, ?2)
                         ORDER BY project_id, instance_id LIMIT ?3",
                    )?;
                    let mut rows = stmt.query(params![from.0, from.1, INSTANCE_PAGE])?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next()? {
                        out.push((
                            text(row, 0)?.to_owned(),
                            text(row, 1)?.to_owned(),
                            row.get(2)?,
                        ));
                    }
                    Ok(out)
                })
                .await?;
            let Some(last) = instances.last() else {
                return Ok(());
            };
            after = (last.0.clone(), last.1.clone());
            let full = instances.len() as i64 == INSTANCE_PAGE;
            for (project, instance, latest) in instances {
                // A plan takes at most PLAN_SEQS sequences of an instance: plan again
                // while one was cut short (an instance with 650 old calculations had 64
                // of them pruned per run, and the run said nothing was left).
                loop {
                    let left = batch.saturating_sub(report.history + report.calculations);
                    if left == 0 {
                        report.more = true;
                        return Ok(());
                    }
                    let plan = {
                        let (p, i) = (project.clone(), instance.clone());
                        self.on_reader("prune prices", move |conn| {
                            plan_instance(conn, &p, &i, latest, calculations, history)
                        })
                        .await?
                    };
                    if plan.is_empty() {
                        break;
                    }
                    let cut_short = plan.cut_short;
                    let (history_rows, calcs) = {
                        let (p, i) = (project.clone(), instance.clone());
                        self.on_writer("prune prices", move |conn| {
                            apply_plan(conn, &p, &i, latest, &plan, left)
                        })
                        .await?
                    };
                    report.history += history_rows;
                    report.calculations += calcs;
                    if report.history + report.calculations >= batch {
                        report.more = true;
                        return Ok(());
                    }
                    if !cut_short || history_rows + calcs == 0 {
                        break;
                    }
                }
            }
            if !full {
                return Ok(());
            }
        }
    }
}

/// The sequences of one instance to prune: whose history rows, and whose calculation rows.
#[derive(Debug, Default)]
struct Plan {
    /// Sequences (ascending) whose history rows go.
    history: Vec<i64>,
    /// Sequences (ascending) whose calculation rows go (once their history is gone).
    calculations: Vec<i64>,
    /// The plan stopped at [`PLAN_SEQS`] sequences or [`PLAN_SCAN`] rows: more may be due.
    cut_short: bool,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.history.is_empty() && self.calculations.is_empty()
    }
}

/// Sequences planned per instance and pass, and rows looked at to find them.
const PLAN_SEQS: usize = 64;
const PLAN_SCAN: usize = 4_096;

/// When calculation `seq` of the instance was made (`None`: no such row, or no time).
fn calculated_at(
    conn: &Connection,
    project: &str,
    instance: &str,
    seq: i64,
) -> DbResult<Option<Timestamp>> {
    Ok(conn
        .prepare_cached(
            "SELECT json_extract(record, '$.calculatedAt') FROM price_calculations
             WHERE project_id = ?1 AND instance_id = ?2 AND seq = ?3",
        )?
        .query_row(params![project, instance, seq], |r| {
            r.get::<_, Option<String>>(0)
        })
        .optional()?
        .flatten()
        .and_then(|t| Timestamp::parse(&t)))
}

/// History rows of calculation `?3` that are not their item's latest (a later row of the
/// same item exists): what the horizon may prune (index `price_history_by_item`).
const PRUNABLE_HISTORY: &str = "SELECT h.item_id FROM price_history h
     WHERE h.project_id = ?1 AND h.instance_id = ?2 AND h.seq = ?3
       AND EXISTS (SELECT 1 FROM price_history n
           WHERE n.project_id = ?1 AND n.instance_id = ?2 AND n.item_id = h.item_id
             AND n.seq > ?3)
     ORDER BY h.item_id LIMIT ?4";

/// Finds what of one instance is past retention: history of calculations older than the
/// horizon that is not its item's latest entry (the latest explains the item's current
/// price), and calculation rows older than their retention that no history row names
/// (after this plan). Never the latest calculation (`seq >= latest`).
fn plan_instance(
    conn: &Connection,
    project: &str,
    instance: &str,
    latest: i64,
    calculations: Option<Timestamp>,
    history: Option<Timestamp>,
) -> DbResult<Plan> {
    let mut plan = Plan::default();
    if let Some(cutoff) = history {
        let mut next_seq = conn.prepare_cached(
            "SELECT seq FROM price_history
             WHERE project_id = ?1 AND instance_id = ?2 AND seq > ?3 AND seq < ?4
             ORDER BY seq LIMIT 1",
        )?;
        let mut prunable = conn.prepare_cached(PRUNABLE_HISTORY)?;
        let mut after = 0;
        plan.cut_short = true;
        for _ in 0..PLAN_SCAN {
            if plan.history.len() >= PLAN_SEQS {
                break;
            }
            let Some(seq) = next_seq
                .query_row(params![project, instance, after, latest], |r| {
                    r.get::<_, i64>(0)
                })
                .optional()?
            else {
                plan.cut_short = false;
                break;
            };
            // Sequences follow time: the first recent one ends the plan.
            match calculated_at(conn, project, instance, seq)? {
                Some(t) if t < cutoff => {}
                _ => {
                    plan.cut_short = false;
                    break;
                }
            }
            if prunable.exists(params![project, instance, seq, 1])? {
                plan.history.push(seq);
            }
            after = seq;
        }
    }
    if let Some(cutoff) = calculations {
        // A calculation's time is counted from when the next one replaced it (the
        // documented rule, and the AWS store's): until 2026-11-29 it was counted from its
        // own time, so a calculation that stayed the latest for a quarter went at the
        // first run after it was replaced. Every row here has a next one (the latest is
        // not among them).
        let mut stmt = conn.prepare_cached(
            "SELECT c.seq,
                    (SELECT json_extract(n.record, '$.calculatedAt') FROM price_calculations n
                     WHERE n.project_id = c.project_id AND n.instance_id = c.instance_id
                       AND n.seq > c.seq
                     ORDER BY n.seq LIMIT 1)
             FROM price_calculations c
             WHERE c.project_id = ?1 AND c.instance_id = ?2 AND c.seq < ?3
             ORDER BY c.seq LIMIT ?4",
        )?;
        let mut rows = stmt.query(params![project, instance, latest, PLAN_SCAN as i64])?;
        let mut scanned = 0;
        let mut history_rows = conn.prepare_cached(
            "SELECT count(*) FROM price_history
             WHERE project_id = ?1 AND instance_id = ?2 AND seq = ?3",
        )?;
        let mut prunable =
            conn.prepare_cached(&format!("SELECT count(*) FROM ({})", PRUNABLE_HISTORY))?;
        while let Some(row) = rows.next()? {
            if plan.calculations.len() >= PLAN_SEQS {
                plan.cut_short = true;
                break;
            }
            scanned += 1;
            if scanned == PLAN_SCAN {
                plan.cut_short = true;
            }
            let seq: i64 = row.get(0)?;
            let old = row
                .get::<_, Option<String>>(1)?
                .and_then(|t| Timestamp::parse(&t))
                .is_some_and(|t| t < cutoff);
            if !old {
                break;
            }
            // History entries name their calculation: its row stays while one does
            // (an item's latest entry stays for ever).
            let rows: i64 =
                history_rows.query_row(params![project, instance, seq], |r| r.get(0))?;
            let going: i64 = if plan.history.contains(&seq) {
                prunable.query_row(params![project, instance, seq, i64::MAX], |r| r.get(0))?
            } else {
                0
            };
            if rows == going {
                plan.calculations.push(seq);
            }
        }
    }
    Ok(plan)
}

/// Deletes what `plan` names, at most `budget` rows, in one transaction; returns (history
/// rows, calculation rows) deleted. A calculation row goes only once no history row names
/// it; a history row only while a later row of its item exists.
fn apply_plan(
    conn: &mut Connection,
    project: &str,
    instance: &str,
    latest: i64,
    plan: &Plan,
    budget: usize,
) -> DbResult<(usize, usize)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // The latest may have moved on since the plan (only forward); never touch it.
    let current: Option<i64> = tx
        .prepare_cached("SELECT seq FROM price_latest WHERE project_id = ?1 AND instance_id = ?2")?
        .query_row(params![project, instance], |r| r.get(0))
        .optional()?;
    let latest = current.unwrap_or(latest).max(latest);
    let mut left = budget;
    let mut history = 0;
    let mut calcs = 0;
    {
        let mut delete_history = tx.prepare_cached(&format!(
            "DELETE FROM price_history
             WHERE project_id = ?1 AND instance_id = ?2 AND seq = ?3 AND item_id IN ({PRUNABLE_HISTORY})"
        ))?;
        for &seq in plan.history.iter().filter(|s| **s < latest) {
            let n = delete_history.execute(params![
                project,
                instance,
                seq,
                i64::try_from(left).unwrap_or(i64::MAX)
            ])?;
            history += n;
            left -= n.min(left);
            if left == 0 {
                break;
            }
        }
        let mut delete_calc = tx.prepare_cached(
            "DELETE FROM price_calculations
             WHERE project_id = ?1 AND instance_id = ?2 AND seq = ?3
               AND NOT EXISTS (SELECT 1 FROM price_history
                   WHERE project_id = ?1 AND instance_id = ?2 AND seq = ?3)",
        )?;
        for &seq in plan.calculations.iter().filter(|s| **s < latest) {
            if left == 0 {
                break;
            }
            let n = delete_calc.execute(params![project, instance, seq])?;
            calcs += n;
            left -= n.min(left);
        }
    }
    tx.commit()?;
    Ok((history, calcs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use pricing_contract::fixtures::{
        Run, attempt, calculated, calculation, delivery, event, header, instance, item_id, kept,
        plus, subscription,
    };
    use pricing_core::ids::InstanceKey;
    use pricing_core::model::{Event, PageRequest};
    use pricing_core::ports::{
        Commit, DeliveryStore, EventStore, InstanceStore, PriceStore, StateStore,
    };
    use pricing_core::pricing::Trigger;
    use pricing_core::retention::Retention;
    use pricing_core::time::Timestamp;
    use serde_json::json;

    use super::*;

    const DAY: i64 = 86_400;

    fn days(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n * DAY as u64))
    }

    fn page(cursor: Option<&str>) -> PageRequest {
        PageRequest {
            cursor: cursor.map(str::to_owned),
            limit: 100,
        }
    }

    fn t0() -> Timestamp {
        Timestamp::parse("2026-01-01T00:00:00Z").unwrap()
    }

    /// Prunes pass after pass until one finds nothing more; the sum of the passes.
    async fn prune_all(
        store: &EmbeddedStore,
        policy: &Retention,
        now: Timestamp,
        batch: usize,
    ) -> PruneReport {
        let mut total = PruneReport::default();
        for _ in 0..1_000 {
            let r = store.prune(policy, now, batch).await.unwrap();
            assert!(
                r.total() <= 4 * batch,
                "a pass stays within its bound: {r:?}"
            );
            total.calculations += r.calculations;
            total.history += r.history;
            total.deliveries += r.deliveries;
            total.events += r.events;
            if !r.more {
                return total;
            }
        }
        panic!("pruning never ended");
    }

    async fn new_instance(store: &EmbeddedStore, run: &Run) -> InstanceKey {
        let key = run.key("p", "i");
        store
            .create_instance(&instance(&key, "I"), &header(0, json!({})))
            .await
            .unwrap();
        key
    }

    /// Calculation n made at day n: items a and b calculated (a new price each time), c
    /// kept, d calculated by the first only and kept since (its one history entry
    /// explains its current price).
    async fn ten_calculations(store: &EmbeddedStore, key: &InstanceKey) {
        for n in 1..=10u64 {
            let d = if n == 1 {
                calculated("d", 7.0, None)
            } else {
                kept("d", 7.0)
            };
            let mut c = calculation(
                &format!("calc-{n}"),
                n,
                Trigger::Schedule,
                vec![
                    calculated("a", 10.0 + n as f64, None),
                    calculated("b", 20.0 + n as f64, None),
                    kept("c", 5.0),
                    d,
                ],
            );
            c.calculated_at = plus(t0(), n as i64 * DAY);
            assert!(store.save_calculation(key, &c, &[]).await.unwrap());
        }
    }

    async fn history_of(store: &EmbeddedStore, key: &InstanceKey, item: &str) -> Vec<u64> {
        store
            .price_history(key, &item_id(item), &page(None))
            .await
            .unwrap()
            .items
            .iter()
            .map(|e| e.sequence)
            .collect()
    }

    /// Only what is past retention goes, in bounded passes; the latest calculation and
    /// its prices stay whatever their age; a history cursor from before still pages on;
    /// a pruned calculation id is unknown; the next calculation still follows the latest.
    #[tokio::test]
    async fn prices_past_retention_go_and_the_latest_stays() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = new_instance(&store, &Run::new("prune-prices")).await;
        ten_calculations(&store, &key).await;
        let latest = store.latest_prices(&key).await.unwrap().unwrap();
        let policy = Retention {
            calculations: days(17),
            price_history: days(14),
            deliveries: None,
            events: None,
        };
        // Day 15: the history horizon is day 1, the calculations' cutoff before day 0.
        assert_eq!(
            prune_all(&store, &policy, plus(t0(), 15 * DAY), 3)
                .await
                .total(),
            0
        );
        // Day 20: history of calculations 1..=5 (before day 6) goes, 2 rows each (d's
        // entry stays: its item's latest), in passes of at most 3 rows. A calculation
        // counts from when the next replaced it: row 1 (replaced on day 2) stays while d's
        // entry names it, row 2 (replaced on day 3, not before day 3) stays.
        let r = prune_all(&store, &policy, plus(t0(), 20 * DAY), 3).await;
        assert_eq!((r.history, r.calculations), (10, 0), "{r:?}");
        assert_eq!(history_of(&store, &key, "a").await, vec![6, 7, 8, 9, 10]);
        assert_eq!(history_of(&store, &key, "b").await, vec![6, 7, 8, 9, 10]);
        assert_eq!(history_of(&store, &key, "d").await, vec![1]);
        assert!(store.has_calculation(&key, "calc-1").await.unwrap());
        assert!(store.has_calculation(&key, "calc-2").await.unwrap());

        // A cursor from before the pruning pages on from where it was.
        let after = store
            .price_history(&key, &item_id("a"), &page(Some("2")))
            .await
            .unwrap();
        assert_eq!(after.items.first().map(|e| e.sequence), Some(6));
        // Day 21: row 2 was replaced 18 days ago and goes, row 3 17 days ago and stays
        // (with calculation 6's history rows: the horizon is day 7).
        let r = prune_all(&store, &policy, plus(t0(), 21 * DAY), 3).await;
        assert_eq!((r.history, r.calculations), (2, 1), "{r:?}");
        assert!(!store.has_calculation(&key, "calc-2").await.unwrap());
        assert!(store.has_calculation(&key, "calc-3").await.unwrap());

        // Years later: everything but the latest calculation, which stays whole.
        let far = plus(t0(), 1_000 * DAY);
        let r = prune_all(&store, &policy, far, 1_000).await;
        assert_eq!((r.history, r.calculations), (6, 7), "{r:?}");
        assert_eq!(store.latest_prices(&key).await.unwrap().unwrap(), latest);
        assert_eq!(history_of(&store, &key, "a").await, vec![10]);
        assert_eq!(history_of(&store, &key, "d").await, vec![1]);
        assert!(store.has_calculation(&key, "calc-1").await.unwrap());
        assert!(store.has_calculation(&key, "calc-10").await.unwrap());
        assert!(!store.has_calculation(&key, "calc-9").await.unwrap());
        assert_eq!(prune_all(&store, &policy, far, 1_000).await.total(), 0);
        let mut next = calculation(
            "calc-11",
            11,
            Trigger::Schedule,
            vec![calculated("a", 1.0, None)],
        );
        next.calculated_at = far;
        assert!(store.save_calculation(&key, &next, &[]).await.unwrap());
    }

    /// An instance with more old calculations than one plan takes (64) has them all pruned
    /// in one pass when the batch allows, and a pass cut short by its batch says there is
    /// more: 64 were pruned per run and the run said nothing was left (an outside probe
    /// found it with 650 calculations).
    #[tokio::test]
    async fn an_instance_with_many_old_calculations_is_pruned_whole_or_says_there_is_more() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = new_instance(&store, &Run::new("prune-many")).await;
        for n in 1..=150u64 {
            let mut c = calculation(
                &format!("calc-{n}"),
                n,
                Trigger::Request,
                vec![calculated("a", 10.0 + n as f64, None)],
            );
            c.calculated_at = plus(t0(), n as i64 * 60);
            assert!(store.save_calculation(&key, &c, &[]).await.unwrap());
        }
        let policy = Retention {
            calculations: days(14),
            price_history: days(14),
            deliveries: None,
            events: None,
        };
        let far = plus(t0(), 100 * DAY);
        // 298 rows are due (149 history rows, 149 calculations): passes of 200 rows take
        // them in two, the first saying there is more, the second that there is not.
        let first = store.prune(&policy, far, 200).await.unwrap();
        assert_eq!(first.history + first.calculations, 200, "{first:?}");
        assert!(first.more, "{first:?}");
        let second = store.prune(&policy, far, 200).await.unwrap();
        assert_eq!(
            (
                first.history + second.history,
                first.calculations + second.calculations
            ),
            (149, 149),
            "{second:?}"
        );
        assert!(!second.more, "{second:?}");
        assert_eq!(store.prune(&policy, far, 200).await.unwrap().total(), 0);
        assert!(store.has_calculation(&key, "calc-150").await.unwrap());
        assert!(!store.has_calculation(&key, "calc-149").await.unwrap());
    }

    /// A calculation row stays while history entries name it (history kept for ever);
    /// with everything kept for ever nothing is looked at.
    #[tokio::test]
    async fn a_calculation_stays_while_its_history_does() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = new_instance(&store, &Run::new("prune-referenced")).await;
        ten_calculations(&store, &key).await;
        let far = plus(t0(), 1_000 * DAY);
        let policy = Retention {
            calculations: days(14),
            price_history: None,
            deliveries: None,
            events: None,
        };
        assert_eq!(prune_all(&store, &policy, far, 100).await.total(), 0);
        assert!(store.has_calculation(&key, "calc-1").await.unwrap());
        assert_eq!(history_of(&store, &key, "a").await.len(), 10);
        assert_eq!(
            prune_all(&store, &Retention::FOREVER, far, 100).await,
            PruneReport::default()
        );
    }

    /// Dispatched events past retention go; undispatched ones stay whatever their age;
    /// listing after a pruned event is NotFound (the API's 400), from the start works.
    #[tokio::test]
    async fn dispatched_events_past_retention_go() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = new_instance(&store, &Run::new("prune-events")).await;
        let events: Vec<Event> = (1..=6)
            .map(|n| event_at(&key, &format!("evt-{n}"), plus(t0(), n * DAY)))
            .collect();
        store
            .commit(
                &key,
                Commit {
                    expected_applied: 0,
                    header: header(1, json!({})),
                    items: Vec::new(),
                    products: Vec::new(),
                    events: events[..3].to_vec(),
                },
            )
            .await
            .unwrap();
        store.append_events(&key, &events[3..]).await.unwrap();
        // Dispatched through evt-4; evt-5 and evt-6 are still to be handed out.
        store.mark_dispatched(&key, "evt-4").await.unwrap();
        let policy = Retention {
            events: days(14),
            ..Retention::FOREVER
        };
        let r = prune_all(&store, &policy, plus(t0(), 1_000 * DAY), 1).await;
        assert_eq!(r.events, 4, "{r:?}");
        let left = store.list_events(&key, None, 10).await.unwrap();
        assert_eq!(
            left.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["evt-5", "evt-6"]
        );
        assert_eq!(
            store.undispatched_events(&key, 10).await.unwrap().len(),
            2,
            "the outbox is untouched"
        );
        assert_eq!(
            store.list_events(&key, Some("evt-2"), 10).await,
            Err(pricing_core::ports::StoreError::NotFound)
        );
        // Only events older than the horizon go: at day 17 (cutoff day 3) evt-5 and
        // evt-6 would stay even dispatched.
        store.mark_dispatched(&key, "evt-6").await.unwrap();
        assert_eq!(
            prune_all(&store, &policy, plus(t0(), 17 * DAY), 10)
                .await
                .events,
            0
        );
        assert_eq!(
            prune_all(&store, &policy, plus(t0(), 20 * DAY), 10)
                .await
                .events,
            1
        );
    }

    fn event_at(key: &InstanceKey, id: &str, at: Timestamp) -> Event {
        Event {
            created_at: at,
            ..event(key, id, json!({"errors": []}))
        }
    }

    /// Final deliveries (succeeded or failed) past retention go; pending and retrying
    /// ones stay whatever their age; a pruned webhook id is unknown.
    #[tokio::test]
    async fn final_deliveries_past_retention_go() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let run = Run::new("prune-deliveries");
        let key = run.key("p", "i");
        let sub = subscription(run.subscription_id("s"), &key.project(), None, t0());
        let old = plus(t0(), DAY);
        let made: Vec<_> = ["ok", "failed", "retrying", "pending"]
            .iter()
            .map(|n| delivery(&key, &sub, &format!("evt-{n}"), old))
            .collect();
        store.create_deliveries(&made).await.unwrap();
        let id = |n: usize| made[n].webhook_id.clone();
        assert!(
            store
                .record_attempt(&id(0), &attempt(1, old, None, true))
                .await
                .unwrap()
        );
        assert!(
            store
                .record_attempt(&id(1), &attempt(1, old, None, false))
                .await
                .unwrap()
        );
        assert!(
            store
                .record_attempt(&id(2), &attempt(1, old, Some(plus(old, 300)), false))
                .await
                .unwrap()
        );
        // A recent final delivery stays.
        let recent = delivery(&key, &sub, "evt-recent", plus(t0(), 40 * DAY));
        store
            .create_deliveries(std::slice::from_ref(&recent))
            .await
            .unwrap();
        store
            .record_attempt(
                &recent.webhook_id,
                &attempt(1, recent.created_at, None, true),
            )
            .await
            .unwrap();
        let policy = Retention {
            deliveries: days(30),
            ..Retention::FOREVER
        };
        let now = plus(t0(), 50 * DAY);
        let r = prune_all(&store, &policy, now, 1).await;
        assert_eq!(r.deliveries, 2, "{r:?}");
        assert!(store.get_delivery(&id(0)).await.unwrap().is_none());
        assert!(store.get_delivery(&id(1)).await.unwrap().is_none());
        assert!(
            store.get_delivery(&id(2)).await.unwrap().is_some(),
            "retrying"
        );
        assert!(
            store.get_delivery(&id(3)).await.unwrap().is_some(),
            "pending"
        );
        assert!(
            store
                .get_delivery(&recent.webhook_id)
                .await
                .unwrap()
                .is_some()
        );
        // The overdue sweep still finds the open ones.
        assert_eq!(store.overdue_deliveries(now, 10).await.unwrap().len(), 2);
    }

    #[test]
    fn the_scans_use_their_indexes() {
        let store = EmbeddedStore::open_in_memory().unwrap();
        let conn = crate::lock(&store.inner.writer);
        for (sql, want) in [
            (FINAL_DELIVERIES, "deliveries_final"),
            (DISPATCHED_EVENTS, "INTEGER PRIMARY KEY"),
            (PRUNABLE_HISTORY, "price_history_by_item"),
        ] {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let nulls = std::iter::repeat_n(rusqlite::types::Null, stmt.parameter_count());
            let plan: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("; ");
            assert!(plan.contains(want), "{sql}\nuses {want}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}\nsorts: {plan}");
        }
    }
}
