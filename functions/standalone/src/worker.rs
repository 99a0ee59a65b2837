//! Entry-processing workers: take "process instance" wake-ups from the durable queue and
//! apply the instance's unapplied log tail. A failed attempt becomes visible again later.

use std::sync::Arc;
use std::time::Duration;

use pricing_core::model::Message;
use pricing_core::ports::{Backlog, SkippedRecord, StoreError, WorkQueue};
use pricing_core::process::Processor;
use pricing_core::retention::Retention;
use pricing_core::scheduler::{self, Budgets, RunTime};
use pricing_core::time::Timestamp;
use pricing_core::work::Handled;
use pricing_embedded::{EmbeddedStore, PruneReport};
use tokio::sync::watch;

/// How long a received message stays hidden while it is worked on.
const VISIBILITY: Duration = Duration::from_secs(60);
/// Messages taken per receive.
const BATCH: usize = 8;

/// Delay before retrying a failed attempt: 1 s, 2 s, 4 s ... capped at 5 min.
pub fn backoff(receive_count: u32) -> Duration {
    Duration::from_secs(1u64 << receive_count.saturating_sub(1).min(8))
        .min(Duration::from_secs(300))
}

/// Runs until `shutdown` turns true; finishes the message at hand first.
pub async fn run(
    store: EmbeddedStore,
    processor: Arc<Processor>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let received = match store.receive(BATCH, VISIBILITY).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "receiving work failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if received.is_empty() {
            tokio::select! {
                _ = store.wait_for_work(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        for r in received {
            let outcome = isolated(&store, &processor, &r.message).await;
            let done = match outcome {
                Ok(()) => store.ack(&r.receipt).await,
                Err(e) => {
                    let delay = backoff(r.receive_count);
                    tracing::warn!(error = %e, attempt = r.receive_count, ?delay, "work failed; will retry");
                    store.retry_later(&r.receipt, delay).await
                }
            };
            if let Err(e) = done {
                // The message reappears after its visibility timeout: nothing is lost.
                tracing::warn!(error = %e, "could not settle a message");
            }
        }
    }
}

/// [`handle`] in a task of its own: a panic while handling one message (some instance's
/// data meeting a bug) fails that message, which is retried with backoff and dead-lettered
/// like any failure, instead of ending this worker's loop for good (and, as the message
/// comes back, every other worker's).
async fn isolated(
    store: &EmbeddedStore,
    processor: &Arc<Processor>,
    message: &Message,
) -> Result<(), StoreError> {
    let (store, processor, message) = (store.clone(), processor.clone(), message.clone());
    match tokio::spawn(async move { handle(&store, &processor, &message).await }).await {
        Ok(outcome) => outcome,
        Err(e) => {
            tracing::error!(error = %e, "handling a message panicked");
            Err(StoreError::Failed(format!(
                "handling the message panicked: {e}"
            )))
        }
    }
}

/// One message, handled as in the Lambda functions (`pricing_core::work::handle`, recorded
/// for the metrics).
pub async fn handle(
    store: &EmbeddedStore,
    processor: &Processor,
    message: &Message,
) -> Result<(), StoreError> {
    let handled =
        pricing_api::metrics::handle_work(store, store, processor, message, Timestamp::now())
            .await?;
    let group = message.group();
    if matches!(handled, Handled::UnknownInstance) {
        tracing::warn!(instance = %group, "{handled}");
    } else {
        tracing::debug!(instance = %group, "{handled}");
    }
    Ok(())
}

/// The time one scheduler run may take (a run that stops early resumes at the next tick).
pub const SCHEDULER_RUN: Duration = Duration::from_secs(20);

/// The scheduler: every `tick`, one run of `pricing_core::scheduler`, as on AWS: the
/// repair sweep, the webhook sweep (undispatched events, overdue deliveries), then the due
/// instances of every tenant in turn (deactivations, the scheduled calculations that are
/// due: one per active instance and schedule slot, idempotent per slot), each step within
/// its share of [`SCHEDULER_RUN`] and its budget; then the pruning step of the retention
/// policy ([`prune`]).
pub async fn schedule(
    store: EmbeddedStore,
    tick: Duration,
    retention: Retention,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // Each run in a task of its own: a panic in one run is logged and the next tick
        // runs again, instead of ending deactivations, sweeps and schedules for good.
        let run = tokio::spawn({
            let store = store.clone();
            async move { scheduler_run(&store, &retention).await }
        });
        if let Err(e) = run.await {
            tracing::error!(error = %e, "a scheduler run panicked; the next tick runs again");
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One tick of [`schedule`].
async fn scheduler_run(store: &EmbeddedStore, retention: &Retention) {
    let budgets = Budgets::default();
    let time = RunTime::starting_now(SCHEDULER_RUN);
    let report = Box::pin(scheduler::run(
        store,
        store,
        Timestamp::now(),
        time,
        &budgets,
    ))
    .await;
    log_skipped(&report.skipped_records);
    for error in &report.errors {
        tracing::warn!(%error, "a scheduler step failed");
    }
    if report.swept + report.undispatched + report.overdue + report.scheduled + report.deactivated
        > 0
        || !report.stopped.is_empty()
    {
        tracing::info!(
            swept = report.swept,
            undispatched = report.undispatched,
            overdue = report.overdue,
            scheduled = report.scheduled,
            deactivated = report.deactivated,
            tenants = report.tenants,
            stopped = ?report.stopped,
            failures = report.error_count,
            "scheduler run"
        );
    }
    prune(store, retention, Timestamp::now(), PRUNE_TIME).await;
}

/// Rows one pruning pass deletes at most per class (one short write transaction each).
pub const PRUNE_BATCH: usize = 500;
/// The time the pruning step may take per scheduler run (what is left waits for the next).
pub const PRUNE_TIME: Duration = Duration::from_secs(5);

/// The pruning step: passes of [`EmbeddedStore::prune`] until nothing past retention is
/// left or `time` is up, yielding between passes so that appends and reads go first.
/// Returns what it deleted.
pub async fn prune(
    store: &EmbeddedStore,
    retention: &Retention,
    now: Timestamp,
    time: Duration,
) -> PruneReport {
    let until = std::time::Instant::now() + time;
    let mut total = PruneReport::default();
    loop {
        match store.prune(retention, now, PRUNE_BATCH).await {
            Ok(pass) => {
                total.calculations += pass.calculations;
                total.history += pass.history;
                total.deliveries += pass.deliveries;
                total.events += pass.events;
                total.more = pass.more;
            }
            Err(e) => {
                tracing::warn!(error = %e, "a pruning pass failed; the next run goes on");
                break;
            }
        }
        if !total.more || std::time::Instant::now() >= until {
            break;
        }
        tokio::task::yield_now().await;
    }
    if total.total() > 0 {
        tracing::info!(
            calculations = total.calculations,
            history = total.history,
            deliveries = total.deliveries,
            events = total.events,
            more = total.more,
            "pruned what is past retention"
        );
    }
    total
}

/// Reports the records a scan could not decode (the scan went on without them).
fn log_skipped(skipped: &[SkippedRecord]) {
    for s in skipped {
        tracing::warn!(record = %s.key, error = %s.error, "scheduler skipped a record it cannot decode");
    }
}

/// The repair sweep at start-up: wakes the processor for every instance whose log is
/// ahead of its state.
pub async fn sweep<S: Backlog + WorkQueue>(store: &S) {
    match pricing_core::process::sweep(store, store, 10_000).await {
        Ok(report) => {
            for (key, error) in &report.failures {
                tracing::warn!(instance = %key, %error, "sweep could not enqueue");
            }
            if report.enqueued > 0 {
                tracing::info!(
                    instances = report.enqueued,
                    "sweep re-enqueued unapplied log tails"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "sweep failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pruning step runs pass after pass (500 rows each) until nothing past retention
    /// is left: 1,200 old dispatched events go in one step; an undispatched one stays.
    #[tokio::test]
    async fn the_pruning_step_runs_passes_until_done() {
        use pricing_core::ports::EventStore;
        use serde_json::json;

        let store = EmbeddedStore::open_in_memory().unwrap();
        let key = pricing_core::ids::InstanceKey::new(
            pricing_core::ids::TenantId::from_claim("acme").unwrap(),
            pricing_core::ids::ProjectId::parse("p").unwrap(),
            pricing_core::ids::InstanceId::parse("i").unwrap(),
        );
        let event = |n: usize| -> pricing_core::model::Event {
            serde_json::from_value(json!({
                "id": format!("evt-{n:05}"), "type": "entries.rejected",
                "projectId": "p", "instanceId": "i",
                "createdAt": "2026-01-01T00:00:00Z", "data": {"errors": []},
            }))
            .unwrap()
        };
        let events: Vec<_> = (0..1_201).map(event).collect();
        for chunk in events.chunks(90) {
            store.append_events(&key, chunk).await.unwrap();
        }
        store.mark_dispatched(&key, "evt-01199").await.unwrap();
        let now = Timestamp::parse("2027-01-01T00:00:00Z").unwrap();
        let total = prune(&store, &Retention::default(), now, Duration::from_secs(600)).await;
        assert_eq!((total.events, total.more), (1_200, false), "{total:?}");
        let left = store.list_events(&key, None, 10).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, "evt-01200");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(40), Duration::from_secs(256));
    }
}
