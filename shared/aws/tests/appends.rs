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
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::box_error::BoxError;
use common::Stack;
use pricing_aws::DynamoStore;
use pricing_contract::fixtures::{Run, new_entry};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, NewEntry};
use pricing_core::ports::EntryLog;

/// Fails DynamoDB requests before they are sent, like a connection lost or a 503 the SDK
/// gave up on: the `fail_at`-th call of the operation `call` (TransactWriteItems unless
/// set), and with `then_everything` every request after it (a process that died half way,
/// leaving its lease). With `lose_answer`, that call is sent and only its answer is lost.
#[derive(Debug, Clone)]
struct Failure {
    call: &'static str,
    calls: Arc<AtomicUsize>,
    fail_at: usize,
    then_everything: bool,
    lose_answer: bool,
    losing: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Failure {
    fn default() -> Self {
        Failure {
            call: "TransactWriteItems",
            calls: Arc::default(),
            fail_at: 0,
            then_everything: false,
            lose_answer: false,
            losing: Arc::default(),
        }
    }
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
        let seen = self.calls.load(Ordering::SeqCst);
        if self.then_everything && seen >= self.fail_at {
            return Err("injected: the process is gone".into());
        }
        if call_of(context.request()).0 == self.call {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
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
    // Answered after the 10 s lease, and not much later (a loaded emulator answers the
    // drain's three dozen requests one at a time).
    assert!(started.elapsed() < Duration::from_secs(20));

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
    assert_eq!(failure.calls.load(Ordering::SeqCst), 2);
    assert!(
        !failure.losing.load(Ordering::SeqCst),
        "the second answer was lost"
    );
}

// ---------------------------------------------------------------------------------------
// Small appends under contention queue and are committed together (docs/aws.md, "Small
// appends under contention: the inbox").
// ---------------------------------------------------------------------------------------

fn instance_pk(key: &InstanceKey) -> String {
    format!("I#{}", key.storage_key())
}

/// The items of one partition whose sort key begins with `prefix`.
async fn items_under(stack: &Stack, pk: &str, prefix: &str) -> usize {
    stack
        .dynamodb()
        .query()
        .table_name(&stack.config.table_name)
        .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
        .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
        .expression_attribute_values(":p", AttributeValue::S(prefix.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("query")
        .count() as usize
}

/// The partitions an instance's inbox spreads over (`INBOX_SHARDS` in `log/inbox.rs`).
const INBOX_SHARDS: u32 = 32;

/// The items in the inbox of the instance `pk` (all its shards), answered or not.
async fn queued(stack: &Stack, pk: &str) -> usize {
    let mut n = 0;
    for shard in 0..INBOX_SHARDS {
        n += items_under(stack, &format!("{pk}#Q{shard}"), "Q#").await;
    }
    n
}

/// A fresh instance of the run `name` (stack and run alike) with one entry appended: its
/// stack, store, key and partition key.
async fn instance_with_one_entry(name: &str) -> (Stack, DynamoStore, InstanceKey, String) {
    let stack = Stack::new(name).await;
    let store = stack.store();
    let key = Run::new(name).key("p", "i");
    store
        .append(&key, vec![new_entry(Some("first"), 0)])
        .await
        .expect("append");
    let pk = instance_pk(&key);
    (stack, store, key, pk)
}

/// `count` answered queue items under `shard_pk`, older than any new request, as callers
/// that died before reading their answers leave them (until the TTL).
async fn answered_leftovers(stack: &Stack, shard_pk: &str, count: usize) {
    use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
    let requests: Vec<WriteRequest> = (0..count)
        .map(|i| {
            let put = PutRequest::builder()
                .item("pk", AttributeValue::S(shard_pk.to_owned()))
                .item("sk", AttributeValue::S(format!("Q#00000000000000{i:012}")))
                .item("o", AttributeValue::S(format!("{}", i + 1)))
                .item("until", AttributeValue::N((now_ms() + 600_000).to_string()))
                .build()
                .expect("put");
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    for chunk in requests.chunks(25) {
        let out = stack
            .dynamodb()
            .batch_write_item()
            .request_items(&stack.config.table_name, chunk.to_vec())
            .send()
            .await
            .expect("batch write");
        assert!(out.unprocessed_items().is_none_or(|u| u.is_empty()));
    }
}

/// A queued request (one entry, id `expired`) whose caller's deadline has passed.
async fn expired_request(stack: &Stack, shard_pk: &str) {
    use std::io::Write as _;
    let record = pricing_core::model::LogRecord {
        sequence: 0,
        transaction_id: new_entry(Some("expired"), 9).transaction_id,
        received_at: new_entry(None, 9).received_at,
        jwt: new_entry(None, 9).jwt,
    };
    let json = serde_json::to_vec(&vec![record]).expect("json");
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&json).expect("deflate");
    let past = now_ms() - 1_000;
    stack
        .dynamodb()
        .put_item()
        .table_name(&stack.config.table_name)
        .item("pk", AttributeValue::S(shard_pk.to_owned()))
        .item(
            "sk",
            AttributeValue::S("Q#0000000000000000000000000X".to_owned()),
        )
        .item("z", AttributeValue::B(z.finish().expect("deflate").into()))
        .item("until", AttributeValue::N(past.to_string()))
        .send()
        .await
        .expect("put");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// Waits until the instance's inbox holds `n` requests (at most 15 s, well within a
/// queued caller's wait).
async fn until_queued(stack: &Stack, pk: &str, n: usize) {
    let deadline = now_ms() + 15_000;
    while queued(stack, pk).await != n {
        assert!(now_ms() < deadline, "{n} requests never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Updates the log head (`LOG`) with `expression`, whose one value `:u` is `value`.
async fn set_log_head(stack: &Stack, pk: &str, expression: &str, value: u64) {
    stack
        .dynamodb()
        .update_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .key("sk", AttributeValue::S("LOG".to_owned()))
        .update_expression(expression)
        .expression_attribute_values(":u", AttributeValue::N(value.to_string()))
        .send()
        .await
        .expect("update the log head");
}

/// Holds the log head's lease as a drainer that died would (until `for_ms` from now).
async fn hold_lease(stack: &Stack, key: &InstanceKey, for_ms: u64) {
    let until = now_ms() + for_ms;
    stack
        .dynamodb()
        .update_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(instance_pk(key)))
        .key("sk", AttributeValue::S("LOG".to_owned()))
        .update_expression("SET lease = :l, lease_until = :u")
        .expression_attribute_values(":l", AttributeValue::S("q_dead".to_owned()))
        .expression_attribute_values(":u", AttributeValue::N(until.to_string()))
        .send()
        .await
        .expect("hold the lease");
}

/// Held by the tests that send a burst of concurrent appends, one at a time: moto answers
/// one request after the other, and two bursts of waiting callers polling at once (each
/// drain round a query per inbox shard among them) slow it past the callers' 20 s wait.
/// DynamoDB serves such requests in parallel.
static BURSTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_entry_appends_at_once_are_committed_together_gapless_and_deduplicated() {
    let _alone = BURSTS.lock().await;
    let stack = Stack::new("appends-inbox").await;
    let store = stack.store();
    let run = Run::new("appends-inbox");
    let key = run.key("p", "i");
    // 24 clients with an order each, 4 more that race one transaction id, 4 without ids.
    let mut calls: Vec<Vec<NewEntry>> = (0..24)
        .map(|n| vec![new_entry(Some(&format!("order-{n}")), n)])
        .collect();
    calls.extend((0..4).map(|n| vec![new_entry(Some("same"), 100 + n)]));
    calls.extend((0..4).map(|n| vec![new_entry(None, 200 + n)]));
    let started = Instant::now();
    let outs = futures_util::future::join_all(
        calls
            .iter()
            .map(|entries| store.append(&key, entries.clone())),
    )
    .await;
    let took = started.elapsed();
    let mut accepted = Vec::new();
    let mut same = Vec::new();
    for (entries, out) in calls.iter().zip(outs) {
        let out = out.expect("every append is answered");
        assert_eq!(out.len(), 1);
        let raced = entries[0]
            .transaction_id
            .as_ref()
            .is_some_and(|t| t.as_str() == "same");
        match out[0] {
            AppendOutcome::Accepted { sequence } => {
                accepted.push((sequence, entries[0].jwt.clone()));
                if raced {
                    same.push(sequence);
                }
            }
            AppendOutcome::Duplicate { sequence } => {
                assert!(raced, "only the raced id has duplicates");
                same.push(sequence);
            }
        }
    }
    accepted.sort();
    assert_eq!(
        accepted.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        (1..=29).collect::<Vec<u64>>(),
        "24 orders, the raced id once and 4 entries without ids, gapless"
    );
    assert_eq!(same.len(), 4);
    assert!(
        same.windows(2).all(|w| w[0] == w[1]),
        "every racer names the one sequence of the raced id: {same:?}"
    );
    let records = store.read(&key, 0, 1_000).await.expect("read");
    assert_eq!(records.len(), 29);
    for (record, (sequence, jwt)) in records.iter().zip(&accepted) {
        assert_eq!((record.sequence, &record.jwt), (*sequence, jwt));
    }
    // Committed together: a segment per transaction that moved the head (the 29 entries
    // are in one block, partition L0), far fewer than one per request.
    let pk = instance_pk(&key);
    let segments = items_under(&stack, &format!("{pk}#L0"), "E#").await;
    println!("29 entries from 32 concurrent appends in {segments} transactions, {took:?}");
    assert!(segments < 15, "{segments} transactions for 29 entries");
    // Nothing is left queued or unread, and the lease is free for the next append.
    assert_eq!(queued(&stack, &pk).await, 0);
    let next = store
        .append(&key, vec![new_entry(Some("after"), 999)])
        .await
        .expect("append");
    assert_eq!(next, vec![AppendOutcome::Accepted { sequence: 30 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_append_outlives_a_dead_drainer_and_withdraws_at_its_deadline() {
    let (stack, store, key, pk) = instance_with_one_entry("appends-queued").await;

    // A drainer died holding the lease, and two shards of its inbox hold 250 answered
    // requests each whose callers died before reading them (more than a page of the
    // drain's query), and one request whose caller's deadline passed: the append queues
    // (its item is there while it waits), and drains itself once the lease expired,
    // without committing the expired one. The lease is cut short only once the append
    // is seen queued, so that a slow emulator cannot let it expire first.
    let leftovers = |shard: u32| if shard < 2 { 250 } else { 0 };
    for shard in 0..2 {
        answered_leftovers(&stack, &format!("{pk}#Q{shard}"), leftovers(shard)).await;
    }
    expired_request(&stack, &format!("{pk}#Q0")).await;
    hold_lease(&stack, &key, 60_000).await;
    let append = async {
        let out = store.append(&key, vec![new_entry(Some("queued"), 1)]).await;
        (out, now_ms())
    };
    let expire_once_queued = async {
        until_queued(&stack, &pk, 2 * 250 + 2).await;
        let lease_end = now_ms() + 500;
        set_log_head(&stack, &pk, "SET lease_until = :u", lease_end).await;
        lease_end
    };
    let ((out, answered_at), lease_end) = tokio::join!(append, expire_once_queued);
    assert!(answered_at >= lease_end, "drained once the lease expired");
    let out = out.expect("drained after the lease expired");
    assert_eq!(out, vec![AppendOutcome::Accepted { sequence: 2 }]);
    let log = store.read(&key, 0, 10).await.expect("read");
    assert_eq!(log.len(), 2, "the expired request is not committed");

    // A lease that outlasts the caller's wait (20 s): the request is withdrawn, nothing
    // of it stays, and the client's retry later is accepted with the next sequence.
    hold_lease(&stack, &key, 60_000).await;
    let err = store
        .append(&key, vec![new_entry(Some("late"), 2)])
        .await
        .expect_err("no answer within the wait");
    assert!(
        matches!(&err, pricing_core::ports::StoreError::Unavailable(m) if m.contains("still queued")),
        "{err}"
    );
    for shard in 0..INBOX_SHARDS {
        assert_eq!(
            items_under(&stack, &format!("{pk}#Q{shard}"), "Q#").await,
            leftovers(shard) + usize::from(shard == 0),
            "the withdrawn request is gone"
        );
    }
    assert_eq!(store.last_sequence(&key).await.expect("last"), 2);
    set_log_head(&stack, &pk, "SET lease_until = :u", now_ms()).await;
    let retry = store
        .append(&key, vec![new_entry(Some("late"), 2)])
        .await
        .expect("retry");
    assert_eq!(retry, vec![AppendOutcome::Accepted { sequence: 3 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_appends_leave_the_lease_to_a_large_append_that_waits_for_it() {
    let (stack, store, key, pk) = instance_with_one_entry("appends-want").await;
    // A drain holds the lease, so a small append queues. Then the drain gives the lease
    // up while a large append has marked that it waits for it (`want`, as it does while a
    // drain holds it, here until 1.5 s from then): the queued append still does not take
    // the lease, and is drained once the large append's wait is over. The lease is given
    // up only once the append is seen queued, so that a slow emulator cannot let it
    // expire first.
    hold_lease(&stack, &key, 60_000).await;
    let append = async {
        let outcome = store.append(&key, vec![new_entry(Some("small"), 1)]).await;
        (outcome, now_ms())
    };
    let release_once_queued = async {
        until_queued(&stack, &pk, 1).await;
        let until = now_ms() + 1_500;
        set_log_head(
            &stack,
            &pk,
            "SET want = :u REMOVE lease, lease_until",
            until,
        )
        .await;
        until
    };
    let ((small, answered_at), until) = tokio::join!(append, release_once_queued);
    assert!(
        answered_at >= until,
        "drained only once the large append's wait is over ({answered_at} < {until})"
    );
    assert_eq!(
        small.expect("the small append"),
        vec![AppendOutcome::Accepted { sequence: 2 }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_write_whose_answer_is_lost_is_withdrawn_and_never_committed() {
    let (stack, store, key, pk) = instance_with_one_entry("appends-lost-put").await;
    // A drain holds the lease, so the append queues; its queue write lands but its
    // answer is lost. The caller withdraws it and fails: nothing of it is committed, even
    // once the lease is free and other appends drain. (The lease is held long enough that
    // a slow emulator cannot let it expire before the append reads it.)
    hold_lease(&stack, &key, 60_000).await;
    let losing = failing_store(
        &stack,
        Failure {
            call: "PutItem",
            fail_at: 1,
            lose_answer: true,
            ..Failure::default()
        },
    );
    let err = losing
        .append(&key, vec![new_entry(Some("lost"), 1)])
        .await
        .expect_err("the queue write's answer was lost");
    println!("the failed append: {err}");
    assert_eq!(
        queued(&stack, &pk).await,
        0,
        "the queued request was withdrawn"
    );
    set_log_head(&stack, &pk, "SET lease_until = :u", now_ms()).await;
    let next = store
        .append(&key, vec![new_entry(Some("next"), 2)])
        .await
        .expect("append");
    assert_eq!(next, vec![AppendOutcome::Accepted { sequence: 2 }]);
    let log = store.read(&key, 0, 10).await.expect("read");
    assert_eq!(
        log.iter()
            .map(|r| r.transaction_id.as_ref().map(|t| t.as_str().to_owned()))
            .collect::<Vec<_>>(),
        vec![Some("first".to_owned()), Some("next".to_owned())]
    );
}

/// Counts the drain rounds read while a drain's transaction is in flight: inbox queries
/// sent while a TransactWriteItems that answers queue items (its body names an inbox
/// partition) has not come back.
#[derive(Debug, Clone, Default)]
struct Overlap {
    transactions: Arc<AtomicUsize>,
    transactions_in_flight: Arc<AtomicUsize>,
    reads_meanwhile: Arc<AtomicUsize>,
}

/// The DynamoDB operation of `request`, and whether its body names an inbox partition.
fn call_of(request: &aws_smithy_runtime_api::http::Request) -> (&str, bool) {
    let target = request.headers().get("x-amz-target").unwrap_or("");
    let inbox = request
        .body()
        .bytes()
        .is_some_and(|b| String::from_utf8_lossy(b).contains("#Q"));
    (
        target.strip_prefix("DynamoDB_20120810.").unwrap_or(target),
        inbox,
    )
}

impl Intercept for Overlap {
    fn name(&self) -> &'static str {
        "Overlap"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        match call_of(context.request()) {
            ("TransactWriteItems", true) => {
                self.transactions.fetch_add(1, Ordering::SeqCst);
                self.transactions_in_flight.fetch_add(1, Ordering::SeqCst);
            }
            ("Query", true) if self.transactions_in_flight.load(Ordering::SeqCst) > 0 => {
                self.reads_meanwhile.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if context
            .request()
            .is_some_and(|r| call_of(r) == ("TransactWriteItems", true))
        {
            self.transactions_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_rounds_read_the_next_round_while_one_commits_and_deduplicate_across_rounds() {
    let _alone = BURSTS.lock().await;
    let (stack, _, key, _) = instance_with_one_entry("appends-rounds").await;
    let overlap = Overlap::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
        .interceptor(overlap.clone())
        .build();
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        &stack.config.table_name,
    );
    // 34 orders, each sent twice at once: 102 actions to commit them (a marker for each
    // first and an answer for each), more than one transaction holds, so the drain takes
    // several rounds, and an order's second request may fall in a later round than its
    // first.
    let calls: Vec<Vec<NewEntry>> = (0..68)
        .map(|n| vec![new_entry(Some(&format!("order-{}", n % 34)), n)])
        .collect();
    let outs = futures_util::future::join_all(
        calls
            .iter()
            .map(|entries| store.append(&key, entries.clone())),
    )
    .await;
    let mut by_order: std::collections::BTreeMap<String, Vec<AppendOutcome>> =
        std::collections::BTreeMap::new();
    for (entries, out) in calls.iter().zip(outs) {
        let out = out.expect("every append is answered");
        let order = entries[0].transaction_id.as_ref().expect("id").as_str();
        by_order.entry(order.to_owned()).or_default().push(out[0]);
    }
    let mut accepted = Vec::new();
    for (order, outcomes) in &by_order {
        let (seqs, firsts): (Vec<u64>, Vec<bool>) = outcomes
            .iter()
            .map(|o| match o {
                AppendOutcome::Accepted { sequence } => (*sequence, true),
                AppendOutcome::Duplicate { sequence } => (*sequence, false),
            })
            .unzip();
        assert_eq!(
            firsts.iter().filter(|f| **f).count(),
            1,
            "{order}: {outcomes:?}"
        );
        assert_eq!(seqs[0], seqs[1], "{order}: both name one sequence");
        accepted.push(seqs[0]);
    }
    accepted.sort();
    assert_eq!(
        accepted,
        (2..=35).collect::<Vec<u64>>(),
        "gapless after the first"
    );
    assert_eq!(log_len(&store, &key).await, 35);
    let reads = overlap.reads_meanwhile.load(Ordering::SeqCst);
    let rounds = overlap.transactions.load(Ordering::SeqCst);
    println!("{rounds} drain transactions; inbox reads while one was in flight: {reads}");
    assert!(reads > 0, "the next round is read while a round commits");
}

/// Makes each TransactWriteItems take `delay` before it is sent (a slow region, a
/// throttled table).
#[derive(Debug, Clone)]
struct Slow {
    delay: Duration,
}

impl Intercept for Slow {
    fn name(&self) -> &'static str {
        "Slow"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if call_of(context.request()).0 == "TransactWriteItems" {
            std::thread::sleep(self.delay);
        }
        Ok(())
    }
}

/// An outside review: API Gateway answers a request that takes 30 s with a 503 of its own,
/// and a leased append had no deadline, so it could commit after that 503, and the client's
/// retry stored its entries without ids twice. Past 20 s an append starts no commit: here
/// its two chunk transactions take 11 s each, so the third (the commit) is not sent, the
/// append fails and nothing is stored; the next append goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_past_its_deadline_commits_nothing() {
    let stack = Stack::new("appends-deadline").await;
    let store = stack.store();
    let run = Run::new("appends-deadline");
    let key = run.key("p", "i");
    // 200 entries with ids: three chunks of at most 97 markers.
    let entries: Vec<NewEntry> = (0..200)
        .map(|n| new_entry(Some(&format!("d-{n}")), n))
        .collect();
    let config = aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
        .interceptor(Slow {
            delay: Duration::from_secs(11),
        })
        .build();
    let slow = DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        &stack.config.table_name,
    );
    let started = Instant::now();
    let err = slow
        .append(&key, entries.clone())
        .await
        .expect_err("past its deadline the append fails");
    println!("after {:?}: {err}", started.elapsed());
    assert!(err.to_string().contains("deadline"), "{err}");
    assert_eq!(store.last_sequence(&key).await.expect("last"), 0);
    assert_eq!(log_len(&store, &key).await, 0, "nothing of it reads back");
    // The retry, at the normal pace, stores every entry once.
    let out = store.append(&key, entries).await.expect("retry");
    assert_eq!(out.len(), 200);
    assert_eq!(log_len(&store, &key).await, 200);
}
