//! One contract suite per port of `pricing_core::ports`, run against every adapter.
//!
//! Each suite is an async function generic over its port, e.g.
//! [`entry_log_contract`]`(&store)`. Suites create their own unique project and instance
//! ids, so several can share one store (see [`all_contracts`]); the queue suite
//! acknowledges stray messages it receives, so give it a queue nobody else consumes.
//! Suites panic (assert) on the first broken rule, naming it. They never assert
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

mod active;
mod backlog;
mod events;
pub mod fixtures;
mod instances;
mod log;
mod matches;
mod prices;
mod projects;
mod queue;
mod state;

use std::future::Future;

use pricing_core::model::{Page, PageRequest};
use pricing_core::ports::{
    ActiveInstances, Backlog, EntryLog, EventStore, InstanceStore, PriceMatchStore, PriceStore,
    ProjectStore, StateStore, WorkQueue,
};

pub use active::active_instances_contract;
pub use backlog::backlog_contract;
pub use events::event_store_contract;
pub use instances::{instance_state_contract, instance_store_contract};
pub use log::entry_log_contract;
pub use matches::price_match_store_contract;
pub use prices::price_store_contract;
pub use projects::project_store_contract;
pub use queue::{QueueTiming, work_queue_contract, work_queue_contract_with};
pub use state::state_store_contract;

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
        + ActiveInstances,
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
        + ActiveInstances,
{
    tokio::join!(
        project_store_contract(store),
        instance_store_contract(store),
        instance_state_contract(store),
        entry_log_contract(store),
        state_store_contract(store),
        event_store_contract(store),
        work_queue_contract_with(store, queue_timing),
        backlog_contract(store),
        price_store_contract(store),
        price_match_store_contract(store),
        active_instances_contract(store),
    );
}

/// Expands to one `#[tokio::test]` per suite (and one running them all on one store),
/// each on a fresh adapter built by the async factory expression; `queue: TIMING` sets the
/// queue suite's [`QueueTiming`] (default: `QueueTiming::default()`).
#[macro_export]
macro_rules! contract_tests {
    ($factory:expr) => {
        $crate::contract_tests!($factory, queue: $crate::QueueTiming::default());
    };
    ($factory:expr, queue: $timing:expr) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn project_store_contract() {
            let store = $factory.await;
            $crate::project_store_contract(&store).await;
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
        async fn active_instances_contract() {
            let store = $factory.await;
            $crate::active_instances_contract(&store).await;
        }

        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn all_contracts_on_one_store() {
            let store = $factory.await;
            $crate::all_contracts_with(&store, $timing).await;
        }
    };
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
