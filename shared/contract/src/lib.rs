//! One contract suite per port of `pricing_core::ports`, run against every adapter.
//!
//! Each suite is an async function generic over its port, e.g.
//! [`entry_log_contract`]`(&store)`. Suites create their own unique project and instance
//! ids, so several can share one store (see [`all_contracts`]); the queue suites
//! ([`work_queue_contract`], [`webhook_queue_contract`], [`webhook_lane_contract`])
//! acknowledge stray messages they receive, so give each queue suite queues nobody else
//! consumes (the work and webhooks queue suites can share a store whose lanes are apart).
//! [`rate_limit_contract`] runs on a RateLimit adapter (not a store) and is called on its
//! own. Suites panic (assert) on the first broken rule, naming it. They never assert
//! performance; the queue suite's timing is configurable ([`QueueTiming`]).
//!
//! An adapter crate runs everything with one line in a test file:
//!
//! ```ignore
//! pricing_contract::contract_tests!(async { MyStore::connect().await.expect("store") });
//! ```
//!
//! The expression is evaluated (and awaited) once per test, so each suite gets a fresh
//! adapter. The calling crate needs `tokio` (with `macros` and `rt-multi-thread`). A queue
//! that needs other timing (or does not merge pending sends) passes its [`QueueTiming`]:
//!
//! ```ignore
//! pricing_contract::contract_tests!(adapters(), queue: QueueTiming { .. });
//! ```
//!
//! A store that also hands out the webhooks lane's queue names the method that does
//! (it is called on the store; the queue suites then run on that queue too, and the lane
//! suite checks that webhooks messages reach it and instance work does not):
//!
//! ```ignore
//! pricing_contract::contract_tests!(adapters(), queue: QueueTiming::default(), webhooks: webhook_queue);
//! ```

mod active;
mod backlog;
mod deliveries;
mod event_reads;
mod events;
pub mod fixtures;
mod instances;
mod limits;
mod log;
mod matches;
mod prices;
mod projects;
mod queue;
mod sales;
mod scheduler;
mod state;
mod subscriptions;
mod tenants;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use pricing_core::model::{Page, PageRequest};
use pricing_core::ports::{
    ActiveInstances, Backlog, DeliveryStore, EntryLog, EventStore, InstanceStore, PriceMatchStore,
    PriceStore, ProjectStore, SchedulerCursors, StateStore, SubscriptionStore, WorkQueue,
};

pub use active::{active_instances_contract, scheduler_cursors_contract};
pub use backlog::backlog_contract;
pub use deliveries::delivery_store_contract;
pub use events::event_store_contract;
pub use instances::{instance_state_contract, instance_store_contract};
pub use limits::{instance_quota_contract, project_quota_contract, rate_limit_contract};
pub use log::entry_log_contract;
pub use matches::price_match_store_contract;
pub use prices::price_store_contract;
pub use projects::project_store_contract;
pub use queue::{
    QueueTiming, webhook_lane_contract, webhook_queue_contract, webhook_queue_contract_with,
    work_queue_contract, work_queue_contract_with,
};
pub use sales::project_sales_contract;
pub use scheduler::{Recorder, scheduler_contract};
pub use state::state_store_contract;
pub use subscriptions::subscription_store_contract;
pub use tenants::tenant_isolation_contract;

/// Every suite at once on one store: shows that the suites (and so concurrent users)
/// do not disturb each other.
pub async fn all_contracts<S>(store: &S)
where
    S: ProjectStore
        + InstanceStore
        + EntryLog
        + StateStore
        + EventStore
        + WorkQueue
        + Backlog
        + PriceStore
        + PriceMatchStore
        + ActiveInstances
        + SchedulerCursors
        + SubscriptionStore
        + DeliveryStore,
{
    all_contracts_with(store, QueueTiming::default()).await;
}

/// [`all_contracts`] with the queue suite's timing.
pub async fn all_contracts_with<S>(store: &S, queue_timing: QueueTiming)
where
    S: ProjectStore
        + InstanceStore
        + EntryLog
        + StateStore
        + EventStore
        + WorkQueue
        + Backlog
        + PriceStore
        + PriceMatchStore
        + ActiveInstances
        + SchedulerCursors
        + SubscriptionStore
        + DeliveryStore,
{
    tokio::join!(
        // Boxed: the joined futures together outgrow a test thread's stack (debug builds).
        Box::pin(project_store_contract(store)),
        Box::pin(project_quota_contract(store)),
        Box::pin(instance_store_contract(store)),
        Box::pin(instance_quota_contract(store)),
        Box::pin(instance_state_contract(store)),
        Box::pin(entry_log_contract(store)),
        Box::pin(state_store_contract(store)),
        Box::pin(event_store_contract(store)),
        Box::pin(work_queue_contract_with(store, queue_timing)),
        Box::pin(backlog_contract(store)),
        Box::pin(price_store_contract(store)),
        Box::pin(price_match_store_contract(store)),
        Box::pin(active_instances_contract(store)),
        Box::pin(scheduler_cursors_contract(store)),
        Box::pin(subscription_store_contract(store)),
        Box::pin(delivery_store_contract(store)),
        Box::pin(tenant_isolation_contract(store)),
    );
}

/// Expands to one `#[tokio::test]` per suite (and one running them all on one store),
/// each on a fresh adapter built by the async factory expression; `queue: TIMING` sets the
/// queue suites' [`QueueTiming`] (default: `QueueTiming::default()`); `webhooks: METHOD`
/// names the store's method that returns its webhooks-lane queue, which adds the webhooks
/// queue suite and the lane suite (and runs the webhooks queue suite beside the others on
/// one store).
#[macro_export]
macro_rules! contract_tests {
    (@suites $factory:expr, $timing:expr) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn project_store_contract() {
            let store = $factory.await;
            $crate::project_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn project_quota_contract() {
            let store = $factory.await;
            $crate::project_quota_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn instance_quota_contract() {
            let store = $factory.await;
            $crate::instance_quota_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn instance_store_contract() {
            let store = $factory.await;
            $crate::instance_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn instance_state_contract() {
            let store = $factory.await;
            $crate::instance_state_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn entry_log_contract() {
            let store = $factory.await;
            $crate::entry_log_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn state_store_contract() {
            let store = $factory.await;
            $crate::state_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn event_store_contract() {
            let store = $factory.await;
            $crate::event_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn work_queue_contract() {
            let store = $factory.await;
            $crate::work_queue_contract_with(&store, $timing).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn backlog_contract() {
            let store = $factory.await;
            $crate::backlog_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn price_store_contract() {
            let store = $factory.await;
            $crate::price_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn price_match_store_contract() {
            let store = $factory.await;
            $crate::price_match_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn tenant_isolation_contract() {
            let store = $factory.await;
            $crate::tenant_isolation_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn active_instances_contract() {
            let store = $factory.await;
            $crate::active_instances_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn scheduler_cursors_contract() {
            let store = $factory.await;
            $crate::scheduler_cursors_contract(&store).await;
        }

        /// On a store of its own: the scheduler serves every tenant of the store.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn scheduler_contract() {
            let store = $factory.await;
            $crate::scheduler_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn project_sales_contract() {
            let store = $factory.await;
            $crate::project_sales_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn subscription_store_contract() {
            let store = $factory.await;
            $crate::subscription_store_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn delivery_store_contract() {
            let store = $factory.await;
            $crate::delivery_store_contract(&store).await;
        }
    };
    ($factory:expr) => {
        $crate::contract_tests!($factory, queue: $crate::QueueTiming::default());
    };
    ($factory:expr, queue: $timing:expr) => {
        $crate::contract_tests!(@suites $factory, $timing);

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn all_contracts_on_one_store() {
            let store = $factory.await;
            $crate::all_contracts_with(&store, $timing).await;
        }
    };
    ($factory:expr, queue: $timing:expr, webhooks: $webhooks:ident) => {
        $crate::contract_tests!(@suites $factory, $timing);

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn webhook_queue_contract() {
            let store = $factory.await;
            $crate::webhook_queue_contract_with(&store.$webhooks(), $timing).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn webhook_lane_contract() {
            let store = $factory.await;
            $crate::webhook_lane_contract(&store, &store, &store.$webhooks(), $timing).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn all_contracts_on_one_store() {
            let store = $factory.await;
            let webhooks = store.$webhooks();
            ::tokio::join!(
                $crate::all_contracts_with(&store, $timing),
                $crate::webhook_queue_contract_with(&webhooks, $timing),
            );
        }
    };
}

/// Awaits every future concurrently (as `tokio::join!` does for a fixed number), results in
/// input order: creators racing through one adapter.
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, out) in futures.iter_mut().zip(done.iter_mut()) {
            if out.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

pub(crate) fn page_request(cursor: Option<String>, limit: usize) -> PageRequest {
    PageRequest { cursor, limit }
}

/// Follows `next` from the first page to the last, checking each page, and returns every
/// item in order.
pub(crate) async fn check_pages<T, F, Fut>(limit: usize, mut fetch: F) -> Vec<T>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Page<T>>,
{
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..10_000 {
        let page = fetch(cursor.take()).await;
        assert!(
            page.items.len() <= limit,
            "a page holds at most `limit` ({limit}) items, got {}",
            page.items.len()
        );
        out.extend(page.items);
        match page.next {
            None => return out,
            Some(next) => cursor = Some(next),
        }
    }
    panic!("paging with limit {limit} did not end");
}
