//! The handlers of the event-driven functions, generic over the ports so they are
//! unit-tested on the embedded adapters.

use pricing_core::jws::Signer;
use pricing_core::lifecycle::deactivate_due;
use pricing_core::model::Message;
use pricing_core::ports::{
    ActiveInstances, Backlog, DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore,
    SkippedRecord, SubscriptionStore, WebhookTransport,
};
use pricing_core::process::{Processor, SweepReport, sweep};
use pricing_core::recalc::due_scheduled_runs;
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
    S: DeliveryStore + SubscriptionStore + InstanceStore + PriceStore,
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

/// What one scheduler run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchedulerReport {
    pub swept: usize,
    pub scheduled: usize,
    pub deactivated: usize,
    /// Instances woken to dispatch their events.
    pub undispatched: usize,
    /// Deliveries re-enqueued because their message was lost.
    pub overdue: usize,
    /// Records a scan could not decode (logged each; the run went on without them).
    pub skipped: usize,
}

/// Logs every record a scan skipped; both scans of a run see the same ones, so the count
/// is of distinct keys.
fn report_skipped(skipped: &[SkippedRecord], report: &mut SchedulerReport) {
    for s in skipped {
        tracing::warn!(record = %s.key, error = %s.error, "scheduler skipped a record it cannot decode");
    }
    report.skipped = report.skipped.max(skipped.len());
}

/// Instances and deliveries the webhook sweep re-enqueues per run at most (a minute's run
/// stays well within the scheduler's timeout; the rest waits for the next minute).
pub const WEBHOOK_SWEEP_LIMIT: usize = 1_000;

/// scheduler: the scheduled calculations that are due (idempotent per instance and slot)
/// first, then the repair sweep (instances whose log is ahead of their state),
/// deactivations and the webhook sweep (undispatched events, overdue deliveries). A step
/// that fails does not stop the others; the run then reports every failure.
pub async fn scheduler_run<S, Q>(store: &S, queue: &Q) -> Result<SchedulerReport, String>
where
    S: Backlog + ActiveInstances + PriceStore + InstanceStore + EventStore + DeliveryStore,
    Q: Enqueue,
{
    let now = Timestamp::now();
    let mut report = SchedulerReport::default();
    let mut errors: Vec<String> = Vec::new();
    match due_scheduled_runs(store, store, now).await {
        Ok(runs) => {
            report_skipped(&runs.skipped, &mut report);
            for message in &runs.due {
                match queue.send(message).await {
                    Ok(()) => report.scheduled += 1,
                    Err(e) => errors.push(format!("enqueueing {message:?}: {e}")),
                }
            }
        }
        Err(e) => errors.push(format!("scheduled calculations: {e}")),
    }
    match scheduled_sweep(store, queue).await {
        Ok(swept) => report.swept = swept.enqueued,
        Err(e) => errors.push(format!("repair sweep: {e}")),
    }
    match deactivate_due(store, queue, now).await {
        Ok(d) => {
            report_skipped(&d.skipped, &mut report);
            report.deactivated = d.done.len();
        }
        Err(e) => errors.push(format!("deactivations: {e}")),
    }
    match webhooks::sweep(store, queue, now, WEBHOOK_SWEEP_LIMIT).await {
        Ok(hooks) => {
            report.undispatched = hooks.instances;
            report.overdue = hooks.deliveries;
        }
        Err(e) => errors.push(format!("webhook sweep: {e}")),
    }
    tracing::info!(
        swept = report.swept,
        scheduled = report.scheduled,
        deactivated = report.deactivated,
        undispatched = report.undispatched,
        overdue = report.overdue,
        skipped = report.skipped,
        failures = errors.len(),
        "scheduler run done"
    );
    if errors.is_empty() {
        Ok(report)
    } else {
        Err(errors.join("; "))
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
