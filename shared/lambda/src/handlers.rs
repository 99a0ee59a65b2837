//! The handlers of the event-driven functions, generic over the ports so they are
//! unit-tested on the embedded adapters.

use std::future::Future;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use pricing_api::metrics;
use pricing_aws::Queues;
use pricing_core::jws::Signer;
use pricing_core::model::Message;
use pricing_core::ports::{
    Backlog, DeliveryStore, Enqueue, EventStore, InstanceStore, PriceStore, StoreError,
    StoreResult, SubscriptionStore, WebhookTransport,
};
use pricing_core::process::{Processor, SweepReport, sweep};
use pricing_core::scheduler::{self, Budgets, RunReport, RunTime, SchedulerStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::Settle;
use pricing_core::work::WorkStore;

use crate::sqs::{handle_batch_within, handle_webhook_batch};

/// The waits before the second and third try, in the same invocation, of a message whose
/// handling failed for a passing reason (throttling, a 5xx, a timeout, a lost conditional
/// write). Handling is idempotent, so a try again here is what a redelivery would do, without
/// spending one of the queue's receives (docs/aws.md, "Process and recalc queues"). In
/// `chaos_short` (10 % failing AWS calls, 15 % cut-off handlers) the most-received wake-up
/// needed 6 receives without it and 2 with it.
pub const TRANSIENT_RETRIES: [Duration; 2] =
    [Duration::from_millis(100), Duration::from_millis(400)];

/// Runs `attempt` until it succeeds, fails for good, or has failed for a passing reason
/// `1 + TRANSIENT_RETRIES.len()` times; returns the last outcome.
pub async fn retry_transient<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreResult<T>>,
{
    for wait in TRANSIENT_RETRIES {
        match attempt().await {
            Err(e @ (StoreError::Unavailable(_) | StoreError::Conflict(_))) => {
                tracing::info!(error = %e, ?wait, "failed for a passing reason; trying again");
                tokio::time::sleep(wait).await;
            }
            outcome => return outcome,
        }
    }
    attempt().await
}

/// entry-processor and recalculator: one message, handled as everywhere else
/// (`pricing_core::work::handle`), tried again in the invocation after a passing failure
/// ([`retry_transient`]); errors make SQS redeliver it.
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
    // handler's future type small (and under the compiler's layout depth). Recorded for
    // the metrics (`pricing_api::metrics`), flushed at the end of the invocation.
    let handled = retry_transient(|| {
        Box::pin(metrics::handle_work(
            store,
            queue,
            processor,
            &message,
            Timestamp::now(),
        ))
    })
    .await
    .map_err(|e| format!("{message:?}: {e}"))?;
    if let Some(lag) = metrics::lag_found(&handled) {
        metrics::record_processing_lag(lag);
    }
    tracing::info!(instance = %message.group(), "{handled}");
    Ok(())
}

/// The whole of the entry-processor and the recalculator, after tracing is set up
/// (`started`): the stack from the environment, then each invocation's batch
/// ([`work_batch`]) within the time its context leaves.
pub async fn serve_work(
    function: &str,
    started: std::time::Instant,
) -> Result<(), lambda_runtime::Error> {
    use aws_lambda_events::event::sqs::SqsEvent;
    use lambda_runtime::{LambdaEvent, service_fn};
    let aws = crate::wiring::Aws::from_env().await?;
    let processor = Processor::new();
    crate::initialized(function, started);
    let (processor, aws) = (&processor, &aws);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        // Read before the batch starts: the records are handled within it.
        let time = time_left(event.context.deadline);
        async move {
            Ok::<SqsBatchResponse, lambda_runtime::Error>(
                work_batch(
                    processor,
                    &aws.store,
                    &aws.queues,
                    event.payload,
                    Some(time),
                )
                .await,
            )
        }
    }))
    .await
}

/// The time an invocation has left by its context's deadline (ms since the epoch).
pub fn time_left(deadline_ms: u64) -> std::time::Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    std::time::Duration::from_millis(deadline_ms.saturating_sub(now))
}

/// One invocation of the entry-processor or the recalculator: the batch's messages
/// ([`work_message`]) within the invocation's time left (`time`, when known:
/// [`crate::sqs::handle_batch_within`]), then the invocation's metrics (EMF,
/// `crate::metrics`).
pub async fn work_batch<S, Q>(
    processor: &Processor,
    store: &S,
    queue: &Q,
    event: SqsEvent,
    time: Option<std::time::Duration>,
) -> SqsBatchResponse
where
    S: WorkStore,
    Q: Enqueue,
{
    let response =
        handle_batch_within(event, time, |m| work_message(processor, store, queue, m)).await;
    crate::metrics::flush();
    response
}

/// One invocation of webhook-delivery: the batch's messages ([`webhook_message`]; each
/// retry hides its message until the next attempt), then the invocation's metrics with
/// the signing key's age.
pub async fn webhook_batch<S, T>(
    store: &S,
    queues: &Queues,
    transport: &T,
    signer: &Signer,
    event: SqsEvent,
) -> SqsBatchResponse
where
    S: DeliveryStore + SubscriptionStore + InstanceStore + PriceStore + EventStore,
    T: WebhookTransport + Clone,
{
    let response = handle_webhook_batch(event, &queues.webhooks, |m| {
        webhook_message(store, queues, transport, signer, m)
    })
    .await;
    metrics::record_signing_key_age(signer, Timestamp::now());
    crate::metrics::flush();
    response
}

/// webhook-delivery: one message of the webhooks lane (an attempt, or a manual trigger),
/// tried again in the invocation after a passing failure ([`retry_transient`]); the caller
/// settles the message as the result says.
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
    T: WebhookTransport + Clone,
{
    // A passing failure is tried again here, as for the work lanes: a webhook message also
    // spends a receive on each of its scheduled attempts (maxReceiveCount 10 = 8 attempts
    // and 2 of slack), so passing failures must not use up the slack.
    let settle = retry_transient(|| {
        metrics::handle_webhook(store, queue, transport, signer, &message, Timestamp::now())
    })
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
    // The age of the oldest due delivery: one query and one read a minute, not on a
    // delivery's path. The run's metrics are flushed with it.
    let oldest = Box::pin(metrics::record_oldest_pending_delivery(
        store,
        Timestamp::now(),
    ));
    if let Err(e) = oldest.await {
        tracing::warn!(error = %e, "could not read the oldest pending delivery");
    }
    crate::metrics::flush();
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Runs `retry_transient` over `outcomes` (one per try), returning its result and the
    /// number of tries it made (in real time: 0.5 s when it waits both waits).
    fn tries(outcomes: Vec<StoreResult<u8>>) -> (StoreResult<u8>, usize) {
        let made = Cell::new(0);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let result = runtime.block_on(retry_transient(|| {
            let outcome = outcomes[made.get()].clone();
            made.set(made.get() + 1);
            async move { outcome }
        }));
        (result, made.get())
    }

    #[test]
    fn passing_failures_are_tried_again_in_the_invocation() {
        let busy = || Err(StoreError::Unavailable("throttled".into()));
        let lost = || Err(StoreError::Conflict("applied_seq moved".into()));
        assert_eq!(tries(vec![busy(), lost(), Ok(7)]), (Ok(7), 3));
        assert_eq!(tries(vec![Ok(1)]), (Ok(1), 1));
        // Three passing failures: the message goes back to SQS with the last one.
        let (result, made) = tries(vec![busy(), busy(), lost()]);
        assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
        assert_eq!(made, 3);
    }

    #[test]
    fn a_failure_for_good_is_not_tried_again() {
        let failed = || Err(StoreError::Failed("item too large".into()));
        let (result, made) = tries(vec![failed(), Ok(1)]);
        assert!(matches!(result, Err(StoreError::Failed(_))), "{result:?}");
        assert_eq!(made, 1);
        let (result, made) = tries(vec![Err(StoreError::NotFound), Ok(1)]);
        assert!(matches!(result, Err(StoreError::NotFound)), "{result:?}");
        assert_eq!(made, 1);
    }
}
