use pricing_core::ids::InstanceKey;
use pricing_core::ports::{Backlog, Commit, EntryLog, StateStore};
use serde_json::json;

use crate::fixtures::{Run, header, new_entry};

/// Backlog with EntryLog and StateStore: `instances_behind` lists the instances whose
/// log has entries past the applied sequence (no state counts as 0), and no others;
/// at most `limit` of them.
pub async fn backlog_contract<S: Backlog + EntryLog + StateStore>(store: &S) {
    let run = Run::new("backlog");
    let caught_up = run.key("p", "caught-up");
    let never_applied = run.key("p", "never-applied");
    let half_applied = run.key("p", "half-applied");
    let no_log = run.key("p", "no-log");

    let append = |key: &InstanceKey, n: usize| {
        let entries = (0..n).map(|i| new_entry(None, i)).collect();
        let key = key.clone();
        async move { store.append(&key, entries).await.expect("append") }
    };
    let commit = |key: &InstanceKey, from: u64, to: u64| {
        let key = key.clone();
        async move {
            store
                .commit(
                    &key,
                    Commit {
                        expected_applied: from,
                        header: header(to, json!({})),
                        items: Vec::new(),
                        products: Vec::new(),
                        events: Vec::new(),
                    },
                )
                .await
                .expect("commit")
        }
    };
    append(&caught_up, 3).await;
    commit(&caught_up, 0, 3).await;
    append(&never_applied, 2).await;
    append(&half_applied, 5).await;
    commit(&half_applied, 0, 2).await;
    commit(&no_log, 0, 0).await;

    let ours = |keys: Vec<InstanceKey>| -> Vec<InstanceKey> {
        let mut k: Vec<_> = keys
            .into_iter()
            .filter(|k| k.project_id == run.project_id("p"))
            .collect();
        k.sort();
        k
    };
    let mut expected = vec![never_applied.clone(), half_applied.clone()];
    expected.sort();
    assert_eq!(
        ours(
            store
                .instances_behind(10_000)
                .await
                .expect("instances_behind")
        ),
        expected,
        "instances with unapplied entries, and only those"
    );
    assert!(
        store
            .instances_behind(1)
            .await
            .expect("instances_behind")
            .len()
            <= 1,
        "at most `limit` instances"
    );

    commit(&half_applied, 2, 5).await;
    append(&caught_up, 1).await;
    let mut expected = vec![never_applied, caught_up];
    expected.sort();
    assert_eq!(
        ours(
            store
                .instances_behind(10_000)
                .await
                .expect("instances_behind")
        ),
        expected,
        "the backlog follows appends and commits"
    );
}
