//! Issue 9, item 7: an append of more than one transaction's worth of entries was written
//! chunk by chunk, so a failure after the first chunk (a 503 to the client) left a prefix
//! in the log and the client's retry counted the entries without a transaction id twice.
//! Now an append is all or nothing on DynamoDB too (docs/aws.md, "append"): these tests
//! inject the failure with an SDK interceptor on the emulator.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use common::Stack;
use pricing_aws::DynamoStore;
use pricing_contract::fixtures::{Run, new_entry};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, NewEntry};
use pricing_core::ports::EntryLog;

/// Fails DynamoDB requests before they are sent, like a connection lost or a 503 the SDK
/// gave up on: the `fail_at`-th TransactWriteItems call, and with `then_everything` every
/// request after it (a process that died half way, leaving its lease). With
/// `lose_answer`, that call is sent and only its answer is lost.
#[derive(Debug, Clone, Default)]
struct Failure {
    transactions: Arc<AtomicUsize>,
    fail_at: usize,
    then_everything: bool,
    lose_answer: bool,
    losing: Arc<std::sync::atomic::AtomicBool>,
}

impl Intercept for Failure {
    fn name(&self) -> &'static str {
        "Failure"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("");
        let seen = self.transactions.load(Ordering::SeqCst);
        if self.then_everything && seen >= self.fail_at {
            return Err("injected: the process is gone".into());
        }
        if target.ends_with(".TransactWriteItems") {
            let n = self.transactions.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.fail_at {
                if self.lose_answer {
                    self.losing.store(true, Ordering::SeqCst);
                } else {
                    return Err("injected: service unavailable".into());
                }
            }
        }
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _: &aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.losing.swap(false, Ordering::SeqCst) {
            return Err("injected: the answer was lost".into());
        }
        Ok(())
    }
}

/// A store on the stack's table whose requests fail as `failure` says (no SDK retries).
fn failing_store(stack: &Stack, failure: Failure) -> DynamoStore {
    let config = aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
        .retry_config(RetryConfig::disabled())
        .interceptor(failure)
        .build();
    DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        &stack.config.table_name,
    )
}

/// 150 entries: every third without a transaction id, the others with one (100 markers: on
/// DynamoDB more than one transaction, at most 97 markers each).
fn request(tag: &str) -> Vec<NewEntry> {
    (0..150)
        .map(|n| {
            let tid = (n % 3 != 0).then(|| format!("{tag}-{n}"));
            new_entry(tid.as_deref(), n)
        })
        .collect()
}

async fn log_len(store: &DynamoStore, key: &InstanceKey) -> usize {
    store.read(key, 0, 10_000).await.expect("read").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_append_that_fails_half_way_leaves_nothing_and_its_retry_counts_once() {
    let stack = Stack::new("appends").await;
    let store = stack.store();
    let run = Run::new("appends");
    let key = run.key("p", "i");
    let entries = request("r");

    // The second transaction fails: the first chunk was written, then the request fails.
    let failing = failing_store(
        &stack,
        Failure {
            fail_at: 2,
            ..Failure::default()
        },
    );
    let err = failing
        .append(&key, entries.clone())
        .await
        .expect_err("the append fails");
    println!("the failed append: {err}");
    assert_eq!(
        store.last_sequence(&key).await.expect("last_sequence"),
        0,
        "nothing of a failed append is visible"
    );
    assert_eq!(log_len(&store, &key).await, 0, "nothing of it reads back");

    // Another client's append goes through at once (the lease was released).
    let started = Instant::now();
    let other = store
        .append(&key, vec![new_entry(None, 1000)])
        .await
        .expect("append");
    assert_eq!(other, vec![AppendOutcome::Accepted { sequence: 1 }]);
    assert!(started.elapsed() < Duration::from_secs(5));

    // The client's retry: every entry once, ids that the failed chunk marked included.
    let out = store.append(&key, entries.clone()).await.expect("retry");
    assert_eq!(
        out,
        (2..=151)
            .map(|sequence| AppendOutcome::Accepted { sequence })
            .collect::<Vec<_>>(),
        "the retry is accepted whole, nothing is a duplicate of the failed attempt"
    );
    let records = store.read(&key, 0, 10_000).await.expect("read");
    assert_eq!(records.len(), 151);
    for (record, entry) in records[1..].iter().zip(&entries) {
        assert_eq!(record.jwt, entry.jwt, "each entry once, in order");
        assert_eq!(record.transaction_id, entry.transaction_id);
    }
    // A second retry (the response was lost): ids are duplicates; entries without an id
    // are new entries, as on the embedded store.
    let again = store.append(&key, entries.clone()).await.expect("again");
    let duplicates = again
        .iter()
        .filter(|o| matches!(o, AppendOutcome::Duplicate { .. }))
        .count();
    assert_eq!(duplicates, 100);
    assert_eq!(log_len(&store, &key).await, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_of_an_append_that_died_expires() {
    let stack = Stack::new("appends-died").await;
    let store = stack.store();
    let run = Run::new("appends-died");
    let key = run.key("p", "i");
    store
        .append(&key, vec![new_entry(Some("before"), 0)])
        .await
        .expect("append");
    let entries = request("d");

    // The process dies after its first chunk: the lease stays.
    let failing = failing_store(
        &stack,
        Failure {
            fail_at: 2,
            then_everything: true,
            ..Failure::default()
        },
    );
    failing
        .append(&key, entries.clone())
        .await
        .expect_err("the append fails");
    assert_eq!(store.last_sequence(&key).await.expect("last"), 1);
    assert_eq!(log_len(&store, &key).await, 1);

    // Another append waits for the lease to expire (at most 10 s), then lands.
    let started = Instant::now();
    let out = store
        .append(&key, vec![new_entry(Some("after"), 1)])
        .await
        .expect("append after the lease");
    assert_eq!(out, vec![AppendOutcome::Accepted { sequence: 2 }]);
    assert!(started.elapsed() < Duration::from_secs(12));

    // The retry: the dead append's entries and markers are overwritten, not duplicates.
    let out = store.append(&key, entries.clone()).await.expect("retry");
    assert!(
        out.iter()
            .all(|o| matches!(o, AppendOutcome::Accepted { .. })),
        "{out:?}"
    );
    let records = store.read(&key, 0, 10_000).await.expect("read");
    assert_eq!(records.len(), 152);
    let seqs: Vec<u64> = records.iter().map(|r| r.sequence).collect();
    assert_eq!(seqs, (1..=152).collect::<Vec<_>>());
    // A leased append after it commits and keeps deduplicating.
    let out = store.append(&key, request("d")).await.expect("again");
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, AppendOutcome::Duplicate { .. }))
            .count(),
        100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_reported_as_done() {
    let stack = Stack::new("appends-lost").await;
    let store = stack.store();
    let run = Run::new("appends-lost");
    let key = run.key("p", "i");
    // 150 entries with ids: two transactions (97 markers at most in one); the answer of
    // the second, which commits, is lost.
    let entries: Vec<NewEntry> = (0..150)
        .map(|n| new_entry(Some(&format!("lost-{n}")), n))
        .collect();
    let failure = Failure {
        fail_at: 2,
        lose_answer: true,
        ..Failure::default()
    };
    let failing = failing_store(&stack, failure.clone());
    let out = failing
        .append(&key, entries)
        .await
        .expect("the commit landed: success");
    assert_eq!(
        out,
        (1..=150)
            .map(|sequence| AppendOutcome::Accepted { sequence })
            .collect::<Vec<_>>()
    );
    assert_eq!(log_len(&store, &key).await, 150);
    assert_eq!(failure.transactions.load(Ordering::SeqCst), 2);
    assert!(
        !failure.losing.load(Ordering::SeqCst),
        "the second answer was lost"
    );
}
