//! The port contract suites against the embedded adapter: on a database file (WAL, reader
//! connections) and in memory.

mod file {
    use std::path::PathBuf;
    use std::time::Duration;

    use pricing_embedded::EmbeddedStore;

    /// A fresh database file under cargo's target tmp dir; files of earlier runs are
    /// pruned (a store cannot hand back a TempDir guard to delete its own).
    async fn store() -> EmbeddedStore {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("embedded-contract");
        std::fs::create_dir_all(&dir).expect("a directory for test databases");
        prune(&dir, Duration::from_secs(600));
        let name = format!("{}.db", pricing_core::ids::ProjectId::generate());
        EmbeddedStore::open(&dir.join(name)).expect("open a database file")
    }

    fn prune(dir: &std::path::Path, age: Duration) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|e| e > age);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    pricing_contract::contract_tests!(
        store(),
        queue: super::queue_timing(),
        webhooks: webhook_queue
    );
}

mod memory {
    use pricing_embedded::EmbeddedStore;

    pricing_contract::contract_tests!(
        async { EmbeddedStore::open_in_memory().expect("open an in-memory database") },
        queue: super::queue_timing(),
        webhooks: webhook_queue
    );
}

/// The suite's default timing with a visibility of 0.5 s: each "hidden while in flight"
/// check must come within it, on a machine loaded by this binary's other suites and
/// whatever else runs.
fn queue_timing() -> pricing_contract::QueueTiming {
    pricing_contract::QueueTiming {
        visibility: std::time::Duration::from_millis(500),
        slack: std::time::Duration::from_millis(500),
        ..pricing_contract::QueueTiming::default()
    }
}

/// The standalone's per-tenant limit: token buckets of 5 refilled at 5 a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_contract() {
    let limiter = pricing_embedded::TokenBuckets::new(5.0, 5.0);
    pricing_contract::rate_limit_contract(&limiter, 5).await;
}
