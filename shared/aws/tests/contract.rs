//! The contract suites of the ports the AWS adapters implement, on the emulator:
//! DynamoStore for ProjectStore, InstanceStore, EntryLog, StateStore, EventStore (with the
//! outbox), Backlog, PriceStore, PriceMatchStore, ActiveInstances, SchedulerCursors,
//! SubscriptionStore and DeliveryStore (and the scheduler's runs on them); SqsQueue (the
//! stack's FIFO process queue) for WorkQueue; `Queues` for the lanes (each message kind
//! reaches its own queue). Each test provisions a stack of its
//! own, so suites never share a table or a queue, except the last one, which runs every
//! store suite and the queue suite at once on one stack.
//!
//! The suites are listed here rather than through `contract_tests!`: the queue suites run
//! on SQS queues, not on the store. The webhooks queue suite (`webhook_queue_contract`)
//! does not run: it checks FIFO group semantics, and the stack's webhook queue is a
//! standard queue (docs/aws.md, "SQS"); the lane suite checks what the AWS side relies on.

mod common;

use std::time::Duration;

use common::Stack;
use pricing_contract::QueueTiming;

/// SQS visibility timeouts are whole seconds; FIFO deduplication ids are unique per send
/// (see `pricing_aws::sqs`), so pending sends do not merge.
fn sqs_timing() -> QueueTiming {
    QueueTiming {
        visibility: Duration::from_secs(1),
        slack: Duration::from_millis(1500),
        patience: Duration::from_secs(30),
        pending_sends_merge: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_store_contract() {
    let store = Stack::new("projects").await.store();
    pricing_contract::project_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_quota_contract() {
    let store = Stack::new("pquota").await.store();
    pricing_contract::project_quota_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_quota_contract() {
    let store = Stack::new("iquota").await.store();
    pricing_contract::instance_quota_contract(&store).await;
}

/// The per-tenant limit on the table: windows of one second holding 5 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_contract() {
    let store = Stack::new("rate").await.store();
    let limiter = pricing_aws::dynamo::DynamoRateLimit::new(
        &store,
        pricing_core::limits::RateWindow {
            limit: 5,
            window: Duration::from_secs(1),
        },
    );
    pricing_contract::rate_limit_contract(&limiter, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_store_contract() {
    let store = Stack::new("instances").await.store();
    pricing_contract::instance_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_state_contract() {
    let store = Stack::new("instance-state").await.store();
    pricing_contract::instance_state_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_log_contract() {
    let store = Stack::new("log").await.store();
    pricing_contract::entry_log_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_store_contract() {
    let store = Stack::new("state").await.store();
    pricing_contract::state_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_store_contract() {
    let store = Stack::new("events").await.store();
    pricing_contract::event_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_queue_contract() {
    let queue = Stack::new("queue").await.process_queue();
    pricing_contract::work_queue_contract_with(&queue, sqs_timing()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_contract() {
    let store = Stack::new("backlog").await.store();
    pricing_contract::backlog_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn price_store_contract() {
    let store = Stack::new("prices").await.store();
    pricing_contract::price_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn price_match_store_contract() {
    let store = Stack::new("matches").await.store();
    pricing_contract::price_match_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_instances_contract() {
    let store = Stack::new("active").await.store();
    pricing_contract::active_instances_contract(&store).await;
    pricing_contract::scheduler_cursors_contract(&store).await;
}

/// The scheduler's runs on the table (bounded steps, tenants in turn, every instance
/// covered): on a stack of its own, as it serves every tenant of its table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_contract() {
    let store = Stack::new("scheduler").await.store();
    pricing_contract::scheduler_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_sales_contract() {
    let store = Stack::new("sales").await.store();
    pricing_contract::project_sales_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_store_contract() {
    let store = Stack::new("subscriptions").await.store();
    pricing_contract::subscription_store_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_isolation_contract() {
    let store = Stack::new("tenants").await.store();
    pricing_contract::tenant_isolation_contract(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_store_contract() {
    let store = Stack::new("deliveries").await.store();
    pricing_contract::delivery_store_contract(&store).await;
}

/// `Queues` sends each message to its lane's queue: instance work to the FIFO process
/// queue, deliveries and manual triggers to the webhook queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_lane_contract() {
    let stack = Stack::new("lanes").await;
    pricing_contract::webhook_lane_contract(
        &stack.queues(),
        &stack.process_queue(),
        &stack.webhook_queue(),
        sqs_timing(),
    )
    .await;
}

/// Every suite at once on one table and queue: suites (and so concurrent users) do not
/// disturb each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_contracts_on_one_stack() {
    let stack = Stack::new("all").await;
    let (store, queue) = (stack.store(), stack.process_queue());
    tokio::join!(
        // Boxed: the joined futures together outgrow a test thread's stack (debug builds).
        Box::pin(pricing_contract::project_store_contract(&store)),
        Box::pin(pricing_contract::instance_store_contract(&store)),
        Box::pin(pricing_contract::instance_state_contract(&store)),
        Box::pin(pricing_contract::entry_log_contract(&store)),
        Box::pin(pricing_contract::state_store_contract(&store)),
        Box::pin(pricing_contract::event_store_contract(&store)),
        Box::pin(pricing_contract::work_queue_contract_with(
            &queue,
            sqs_timing()
        )),
        Box::pin(pricing_contract::backlog_contract(&store)),
        Box::pin(pricing_contract::price_store_contract(&store)),
        Box::pin(pricing_contract::price_match_store_contract(&store)),
        Box::pin(pricing_contract::active_instances_contract(&store)),
        Box::pin(pricing_contract::scheduler_cursors_contract(&store)),
        Box::pin(pricing_contract::subscription_store_contract(&store)),
        Box::pin(pricing_contract::delivery_store_contract(&store)),
        Box::pin(pricing_contract::tenant_isolation_contract(&store)),
    );
}

/// Counts the SQS calls by operation (`SendMessage`, `SendMessageBatch`, ...).
#[derive(Debug, Clone, Default)]
struct SqsCalls(std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, usize>>>);

impl aws_sdk_sqs::config::Intercept for SqsCalls {
    fn name(&self) -> &'static str {
        "SqsCalls"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("");
        let operation = target.strip_prefix("AmazonSQS.").unwrap_or(target);
        *self
            .0
            .lock()
            .expect("calls")
            .entry(operation.to_owned())
            .or_default() += 1;
        Ok(())
    }
}

/// `Queues::send_all` (a project-wide calculatePrices) sends each lane's messages in
/// SendMessageBatch calls of ten, not one SendMessage per message, and every message
/// reaches its lane's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_all_sends_each_lanes_messages_in_batches_of_ten() {
    use pricing_core::model::Message;
    use pricing_core::ports::{Enqueue, WorkQueue};
    use pricing_core::pricing::Trigger;
    let stack = Stack::new("batches").await;
    let calls = SqsCalls::default();
    let config = aws_sdk_sqs::config::Builder::from(&stack.sdk)
        .interceptor(calls.clone())
        .build();
    let queues = pricing_aws::Queues::new(&aws_sdk_sqs::Client::from_conf(config), &stack.config);
    let run = pricing_contract::fixtures::Run::new("batches");
    let recalc = |n: usize| Message::Recalculate {
        key: run.key("p", &format!("i{n}")),
        calculation_id: format!("calc_{n}"),
        trigger: Trigger::Request,
        metadata: Some(serde_json::json!({"pad": "x".repeat(8_000)})),
    };
    let mut messages: Vec<Message> = (0..25).map(recalc).collect();
    messages.extend((0..12).map(|n| Message::ProcessInstance {
        key: run.key("p", &format!("i{n}")),
    }));
    messages.extend((0..11).map(|n| Message::Deliver {
        webhook_id: run.webhook_id(&format!("d{n}")),
    }));
    queues.send_all(&messages).await.expect("send_all");
    let counted = calls.0.lock().expect("calls").clone();
    assert_eq!(counted.get("SendMessage"), None, "{counted:?}");
    // 3 + 2 + 2 batches (an attempt the SDK retries on a slow emulator counts twice).
    let batches = counted.get("SendMessageBatch").copied().unwrap_or(0);
    assert!((7..=14).contains(&batches), "{counted:?}");
    // Every message on its lane's queue.
    for (queue, lane) in [
        (&queues.recalc, pricing_core::model::Lane::Recalc),
        (&queues.process, pricing_core::model::Lane::Process),
        (&queues.webhooks, pricing_core::model::Lane::Webhooks),
    ] {
        let mut want: Vec<&Message> = messages.iter().filter(|m| m.lane() == lane).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !want.is_empty() {
            assert!(std::time::Instant::now() < deadline, "{want:?} never came");
            for r in queue
                .receive(10, Duration::from_secs(60))
                .await
                .expect("receive")
            {
                queue.ack(&r.receipt).await.expect("ack");
                let at = want.iter().position(|m| **m == r.message);
                want.remove(at.expect("a message sent, once"));
            }
        }
    }
}
