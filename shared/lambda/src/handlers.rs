//! The handlers of the event-driven functions, generic over the ports so they are
//! unit-tested on the embedded adapters.

use std::time::{Duration, Instant};

use pricing_core::jws::Signer;
use pricing_core::model::Message;
use pricing_core::ports::{
    Backlog, DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore, SubscriptionStore,
    WebhookTransport,
};
use pricing_core::process::{Processor, SweepReport, sweep};
use pricing_core::scheduler::{self, Budgets, RunReport, RunTime, SchedulerStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{self, Settle};
use pricing_core::work::{WorkStore, handle};

/// entry-processor and recalculator: one message, handled as everywhere else
/// (`pricing_core::work::handle`); errors make SQS redeliver it.
pub async fn work_message<S, Q>(
    processor: &Processor,
    store: &S,
    queue: &Q,
    message: Message,
) -> Result<(), String>
where
    S: WorkStore,
    Q: Enqueue,
{
    // Boxed: the nested futures of processing and pricing are deep; a box keeps the
    // handler's future type small (and under the compiler's layout depth).
    let handled = Box::pin(handle(store, queue, processor, &message, Timestamp::now()))
        .await
        .map_err(|e| format!("{message:?}: {e}"))?;
    tracing::info!(instance = %message.group(), "{handled}");
    Ok(())
}

/// webhook-delivery: one message of the webhooks lane (an attempt, or a manual trigger);
/// the caller settles the message as the result says.
pub async fn webhook_message<S, Q, T>(
    store: &S,
    queue: &Q,
    transport: &T,
    signer: &Signer,
    message: Message,
) -> Result<Settle, String>
where
    S: DeliveryStore + SubscriptionStore + InstanceStore + PriceStore + EventStore,
    Q: Enqueue,
    T: WebhookTransport,
{
    let settle = webhooks::handle(store, queue, transport, signer, &message, Timestamp::now())
        .await
        .map_err(|e| format!("{message:?}: {e}"))?;
    match settle {
        Settle::DeadLetter => {
            tracing::warn!(
                ?message,
                "webhook failed for good; to the dead-letter queue"
            )
        }
        _ => tracing::info!(?message, ?settle, "webhook handled"),
    }
    Ok(settle)
}

/// Instances re-enqueued per sweep at most.
pub const SWEEP_LIMIT: usize = 10_000;

/// Time kept back from the function's deadline for the request in flight and the report.
pub const SCHEDULER_MARGIN: Duration = Duration::from_secs(5);
/// A run's time at most (EventBridge starts one every minute).
pub const SCHEDULER_RUN: Duration = Duration::from_secs(50);

/// The scheduler's run time from the function's deadline (milliseconds since the epoch,
/// as the Lambda context gives it).
pub fn run_time(deadline_ms: u64) -> RunTime {
    let now_ms = u64::try_from(Timestamp::now().millis()).unwrap_or(0);
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
    RunTime::until(Instant::now() + left, SCHEDULER_MARGIN, SCHEDULER_RUN)
}

/// scheduler: one run of `pricing_core::scheduler` (the repair sweep, the webhook sweep,
/// then the due instances of every tenant in turn: deactivations and scheduled
/// calculations), each step within its share of `time` and its budget. A step that fails
/// does not stop the others; the run then reports every failure.
pub async fn scheduler_run<S, Q>(store: &S, queue: &Q, time: RunTime) -> Result<RunReport, String>
where
    S: SchedulerStore,
    Q: Enqueue,
{
    // Boxed: the steps' nested futures are deep (as in `work_message`).
    let budgets = Budgets::default();
    let report = Box::pin(scheduler::run(
        store,
        queue,
        Timestamp::now(),
        time,
        &budgets,
    ))
    .await;
    for s in &report.skipped_records {
        tracing::warn!(record = %s.key, error = %s.error, "scheduler skipped a record it cannot decode");
    }
    tracing::info!(
        swept = report.swept,
        undispatched = report.undispatched,
        overdue = report.overdue,
        scheduled = report.scheduled,
        deactivated = report.deactivated,
        already_calculated = report.already_calculated,
        tenants = report.tenants,
        skipped = report.skipped,
        stopped = ?report.stopped,
        failures = report.error_count,
        "scheduler run done"
    );
    if report.error_count == 0 {
        Ok(report)
    } else {
        Err(format!(
            "{} failures: {}",
            report.error_count,
            report.errors.join("; ")
        ))
    }
}

/// The repair sweep (re-enqueue instances whose log is ahead of their state).
pub async fn scheduled_sweep<B: Backlog, Q: Enqueue>(
    backlog: &B,
    queue: &Q,
) -> Result<SweepReport, String> {
    let report = sweep(backlog, queue, SWEEP_LIMIT)
        .await
        .map_err(|e| e.to_string())?;
    for (key, error) in &report.failures {
        tracing::warn!(instance = %key, %error, "sweep could not enqueue");
    }
    if !report.failures.is_empty() {
        return Err(format!(
            "{} instances could not be enqueued",
            report.failures.len()
        ));
    }
    Ok(report)
}
