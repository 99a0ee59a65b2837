//! The handlers of the event-driven functions, generic over the ports so they are
//! unit-tested on the embedded adapters.

use pricing_core::model::Message;
use pricing_core::ports::{
    ActiveInstances, Backlog, Enqueue, EntryLog, InstanceStore, PriceMatchStore, PriceStore,
    StateStore,
};
use pricing_core::process::{Processor, SweepReport, sweep};
use pricing_core::recalc::due_scheduled_runs;
use pricing_core::time::Timestamp;
use pricing_core::work::handle;

/// entry-processor and recalculator: one message, handled as everywhere else
/// (`pricing_core::work::handle`); errors make SQS redeliver it.
pub async fn work_message<S, Q>(
    processor: &Processor,
    store: &S,
    queue: &Q,
    message: Message,
) -> Result<(), String>
where
    S: EntryLog + StateStore + InstanceStore + PriceStore + PriceMatchStore,
    Q: Enqueue,
{
    // Boxed: the nested futures of processing and pricing are deep; a box keeps the
    // handler's future type small (and under the compiler's layout depth).
    let handled = Box::pin(handle(store, queue, processor, &message, Timestamp::now()))
        .await
        .map_err(|e| format!("{message:?}: {e}"))?;
    let instance = match &message {
        Message::ProcessInstance { key } | Message::Recalculate { key, .. } => key,
    };
    tracing::info!(%instance, "{handled}");
    Ok(())
}

/// webhook-delivery, until the webhooks milestone: refuses what it cannot handle, so it is
/// redelivered and lands in the dead-letter queue instead of vanishing.
pub async fn unsupported(function: &str, message: Message) -> Result<(), String> {
    Err(format!("{function} cannot handle {message:?}"))
}

/// Instances re-enqueued per sweep at most.
pub const SWEEP_LIMIT: usize = 10_000;

/// What one scheduler run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchedulerReport {
    pub swept: usize,
    pub scheduled: usize,
}

/// scheduler: the repair sweep (instances whose log is ahead of their state), then the
/// scheduled calculations that are due (idempotent per instance and slot).
pub async fn scheduler_run<S, Q>(store: &S, queue: &Q) -> Result<SchedulerReport, String>
where
    S: Backlog + ActiveInstances + PriceStore,
    Q: Enqueue,
{
    let report = scheduled_sweep(store, queue).await?;
    let due = due_scheduled_runs(store, store, Timestamp::now())
        .await
        .map_err(|e| e.to_string())?;
    for message in &due {
        queue
            .send(message)
            .await
            .map_err(|e| format!("enqueueing {message:?}: {e}"))?;
    }
    tracing::info!(
        swept = report.enqueued,
        scheduled = due.len(),
        "scheduler run done"
    );
    Ok(SchedulerReport {
        swept: report.enqueued,
        scheduled: due.len(),
    })
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
