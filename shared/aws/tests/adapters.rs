//! Behaviour of the AWS adapters beyond the port contracts, on the emulator: signing-key
//! bootstrap, duplicated wake-ups, lost append races, the backlog marker's lifecycle,
//! commits made of events only, SQS batching, and the mapping of SDK errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::Stack;
use pricing_aws::DynamoStore;
use pricing_contract::fixtures::{Run, event, header, instance, new_entry};
use pricing_core::ids::InstanceKey;
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::{AppendOutcome, Message, NewEntry};
use pricing_core::ports::{
    Backlog, Commit, EntryLog, EventStore, InstanceStore, MAX_COMMIT_RECORDS, ProjectStore,
    StateStore, StoreError, WorkQueue,
};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use serde_json::{Value, json};

fn secret_string(keys: &[StoredKey]) -> String {
    serde_json::to_string(keys).expect("keys encode")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_keys_are_bootstrapped_once() {
    let stack = Stack::new("secrets").await;
    let client = stack.secrets();
    let id = &stack.config.signing_keys_secret_id;

    let first = pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id)
        .await
        .expect("bootstrap a key into the empty secret");
    assert_eq!(first.len(), 1, "one key is generated");
    assert!(first[0].kid.starts_with('k') && first[0].kid.len() > 10);
    Signer::from_keys(&first).expect("the stored key signs");
    let stored = client
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .expect("read the secret");
    assert_eq!(
        stored.secret_string(),
        Some(secret_string(&first).as_str()),
        "the key is stored in the secret"
    );

    let again = pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id)
        .await
        .expect("load");
    assert_eq!(
        secret_string(&again),
        secret_string(&first),
        "a second call reads it"
    );

    // A fresh (empty) secret and several concurrent cold starts: they agree on one key.
    let stack = Stack::new("secrets-race").await;
    let client = stack.secrets();
    let id = &stack.config.signing_keys_secret_id;
    let (a, b, c) = tokio::join!(
        pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id),
        pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id),
        pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id),
    );
    let (a, b, c) = (a.expect("a"), b.expect("b"), c.expect("c"));
    assert_eq!(a.len(), 1);
    assert_eq!(
        secret_string(&a),
        secret_string(&b),
        "concurrent bootstraps agree"
    );
    assert_eq!(
        secret_string(&a),
        secret_string(&c),
        "concurrent bootstraps agree"
    );
    let versions = client
        .list_secret_version_ids()
        .secret_id(id)
        .send()
        .await
        .expect("versions");
    assert_eq!(
        versions.versions().len(),
        2,
        "the empty version and exactly one bootstrapped version"
    );

    // A secret that is not a key list is an error that does not echo the content.
    client
        .put_secret_value()
        .secret_id(id)
        .secret_string(r#"[{"kid": "x", "pkcs8": "c2VjcmV0LW1hdGVyaWFs"}]"#)
        .send()
        .await
        .expect("overwrite the secret");
    let err = pricing_aws::secrets::load_or_bootstrap_signing_keys(&client, id)
        .await
        .expect_err("an invalid key list is refused");
    assert!(
        !err.to_string().contains("c2VjcmV0"),
        "no key material in errors: {err}"
    );
}

fn signer() -> Signer {
    let key = StoredKey::generate("k-test".into(), Timestamp::now()).expect("a key");
    Signer::from_keys(&[key]).expect("a signer")
}

fn signed(signer: &Signer, tid: &str, entry: Value) -> NewEntry {
    NewEntry {
        transaction_id: Some(pricing_contract::fixtures::transaction_id(tid)),
        received_at: Timestamp::now(),
        jwt: signer.sign_jws(entry.to_string().as_bytes()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_wake_up_changes_nothing() {
    let stack = Stack::new("redelivery").await;
    let store = stack.store();
    let queue = stack.process_queue();
    let run = Run::new("redelivery");
    let key = run.key("p", "i");
    store
        .create_instance(&instance(&key, "I"), &header(0, json!({})))
        .await
        .expect("create_instance");
    let s = signer();
    let mut entries = vec![
        signed(
            &s,
            "reg-p",
            json!({"type": "productRegistration", "data": {"productId": "P", "capacity": 100}}),
        ),
        signed(
            &s,
            "reg-a",
            json!({"type": "itemRegistration", "data": {"itemId": "A", "productId": "P",
                "salesPeriod": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 50}}}),
        ),
        // Unknown item: rejected, and reported in an event.
        signed(
            &s,
            "sale-x",
            json!({"type": "itemSale", "data": {"itemId": "X", "price": 12}}),
        ),
    ];
    for n in 0..120 {
        entries.push(signed(
            &s,
            &format!("sale-{n}"),
            json!({"type": "itemSale", "data": {"itemId": "A", "price": 50}}),
        ));
    }
    store.append(&key, entries).await.expect("append");

    // The entries API enqueues a wake-up; a retry of the request enqueues another.
    let wake = Message::ProcessInstance { key: key.clone() };
    queue.send(&wake).await.expect("send");
    queue.send(&wake).await.expect("send again");

    let mut runs = Vec::new();
    let mut states = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runs.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "both wake-ups arrive"
        );
        for r in queue
            .receive(10, Duration::from_secs(30))
            .await
            .expect("receive")
        {
            assert_eq!(r.message, wake);
            let k = &key;
            // A fresh processor per message: another Lambda instance, no warm cache.
            let report = Processor::new()
                .process(&store, &store, k, Timestamp::now())
                .await
                .expect("process");
            queue.ack(&r.receipt).await.expect("ack");
            runs.push(report);
            states.push(store.load_state(&key).await.expect("load_state"));
        }
    }
    assert_eq!(runs[0].applied, 122, "the first run applies the log");
    assert_eq!(runs[0].rejected, 1);
    assert!(runs[0].commits >= 1);
    assert_eq!(
        runs[1].applied + runs[1].rejected,
        0,
        "the second finds nothing to do"
    );
    assert_eq!(runs[1].commits, 0);
    assert_eq!(
        states[0], states[1],
        "the state is the same as after one run"
    );
    let item = &states[1].items[&pricing_contract::fixtures::item_id("A")];
    assert_eq!(item.sold, 120);
    assert_eq!(states[1].header.applied_seq, 123);
    let events = store.list_events(&key, None, 100).await.expect("events");
    assert_eq!(
        events.len(),
        1,
        "one entries.rejected event, not two: {events:?}"
    );
    assert_eq!(events[0].event_type, "entries.rejected");
    assert!(
        store
            .instances_behind(10_000)
            .await
            .expect("instances_behind")
            .iter()
            .all(|k| k != &key),
        "caught up: not in the backlog"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_appends_accept_each_transaction_id_once() {
    let stack = Stack::new("append-race").await;
    let store = stack.store();
    let run = Run::new("race");
    let key = run.key("p", "i");
    // Four appends whose ids overlap pairwise, each spanning two transaction chunks.
    let batch = |from: usize, to: usize| -> Vec<NewEntry> {
        (from..to)
            .map(|n| new_entry(Some(&format!("t-{n:03}")), n))
            .collect()
    };
    let (a, b, c, d) = tokio::join!(
        store.append(&key, batch(0, 60)),
        store.append(&key, batch(30, 90)),
        store.append(&key, batch(60, 120)),
        store.append(&key, batch(0, 120)),
    );
    let mut accepted: BTreeMap<String, u64> = BTreeMap::new();
    let mut duplicates: Vec<(String, u64)> = Vec::new();
    for (out, from) in [(a, 0), (b, 30), (c, 60), (d, 0)] {
        let out = out.expect("a racing append succeeds");
        for (n, o) in out.into_iter().enumerate() {
            let tid = format!("t-{:03}", from + n);
            match o {
                AppendOutcome::Accepted { sequence } => {
                    assert!(
                        accepted.insert(tid.clone(), sequence).is_none(),
                        "{tid} accepted twice"
                    );
                }
                AppendOutcome::Duplicate { sequence } => duplicates.push((tid, sequence)),
            }
        }
    }
    assert_eq!(accepted.len(), 120, "every id accepted exactly once");
    let sequences: BTreeSet<u64> = accepted.values().copied().collect();
    assert_eq!(
        sequences.into_iter().collect::<Vec<_>>(),
        (1..=120).collect::<Vec<u64>>(),
        "gapless"
    );
    for (tid, seq) in duplicates {
        assert_eq!(
            accepted[&tid], seq,
            "a duplicate names the accepted sequence"
        );
    }
    let log = store.read(&key, 0, 1000).await.expect("read");
    assert_eq!(log.len(), 120);
    for r in &log {
        let tid = r.transaction_id.as_ref().expect("an id").to_string();
        assert_eq!(
            accepted[&tid], r.sequence,
            "the log agrees with the outcomes"
        );
    }
    assert_eq!(store.last_sequence(&key).await.expect("last"), 120);
}

/// The backlog marker attributes on the LOG item, read directly.
async fn marker(stack: &Stack, key: &InstanceKey) -> Option<String> {
    let pk = format!("I#{}", key.storage_key());
    let item = stack
        .dynamodb()
        .get_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk))
        .key("sk", AttributeValue::S("LOG".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get LOG")
        .item?;
    item.get("gsi1pk").and_then(|v| v.as_s().ok()).map(|pk| {
        let sk = item.get("gsi1sk").and_then(|v| v.as_s().ok());
        format!("{pk} {}", sk.map_or("-", |s| s.as_str()))
    })
}

fn header_commit(from: u64, to: u64) -> Commit {
    Commit {
        expected_applied: from,
        header: header(to, json!({})),
        items: Vec::new(),
        products: Vec::new(),
        events: Vec::new(),
    }
}

async fn behind(store: &DynamoStore, key: &InstanceKey) -> bool {
    store
        .instances_behind(10_000)
        .await
        .expect("instances_behind")
        .contains(key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_marker_follows_appends_and_commits() {
    let stack = Stack::new("backlog").await;
    let store = stack.store();
    let run = Run::new("backlog");
    let key = run.key("p", "i");

    assert_eq!(marker(&stack, &key).await, None, "no log, no marker");
    store
        .append(&key, vec![new_entry(None, 1), new_entry(None, 2)])
        .await
        .expect("append");
    let set = marker(&stack, &key)
        .await
        .expect("an append sets the marker");
    assert!(
        set.starts_with("BACKLOG#") && set.ends_with(&format!(" I#{}", key.storage_key())),
        "{set}"
    );
    assert!(behind(&store, &key).await);

    store
        .commit(&key, header_commit(0, 1))
        .await
        .expect("commit");
    assert!(
        marker(&stack, &key).await.is_some(),
        "a partial commit keeps it"
    );
    assert!(behind(&store, &key).await);

    store
        .commit(&key, header_commit(1, 2))
        .await
        .expect("commit");
    assert_eq!(marker(&stack, &key).await, None, "catching up removes it");
    assert!(!behind(&store, &key).await);

    store
        .append(&key, vec![new_entry(None, 3)])
        .await
        .expect("append");
    assert!(
        marker(&stack, &key).await.is_some(),
        "a new append sets it again"
    );
    assert!(behind(&store, &key).await);
    store
        .commit(&key, header_commit(2, 3))
        .await
        .expect("commit");
    assert_eq!(marker(&stack, &key).await, None);

    // A marker left behind (a commit whose cleanup failed) is cleared by the sweep's
    // query instead of being reported.
    let pk = format!("I#{}", key.storage_key());
    stack
        .dynamodb()
        .update_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk.clone()))
        .key("sk", AttributeValue::S("LOG".into()))
        .update_expression("SET gsi1pk = :b, gsi1sk = :s")
        .expression_attribute_values(":b", AttributeValue::S("BACKLOG#0".into()))
        .expression_attribute_values(":s", AttributeValue::S(pk))
        .send()
        .await
        .expect("plant a stale marker");
    assert!(marker(&stack, &key).await.is_some());
    assert!(
        !behind(&store, &key).await,
        "a stale marker is not reported"
    );
    assert_eq!(marker(&stack, &key).await, None, "and it is cleared");

    // Many instances behind: all are found across the index's shards, `limit` holds.
    let keys: Vec<InstanceKey> = (0..30)
        .map(|n| run.key("many", &format!("i{n:02}")))
        .collect();
    for k in &keys {
        store
            .append(k, vec![new_entry(None, 0)])
            .await
            .expect("append");
    }
    let found: BTreeSet<InstanceKey> = store
        .instances_behind(10_000)
        .await
        .expect("instances_behind")
        .into_iter()
        .collect();
    assert!(
        keys.iter().all(|k| found.contains(k)),
        "every instance behind is found"
    );
    assert_eq!(store.instances_behind(7).await.expect("behind").len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_only_events_fits_one_transaction() {
    let stack = Stack::new("events").await;
    let store = stack.store();
    let run = Run::new("events");
    let key = run.key("p", "i");
    let events: Vec<_> = (0..MAX_COMMIT_RECORDS - 1)
        .map(|n| event(&key, &format!("evt-{:03}", 200 - n), json!({"n": n})))
        .collect();
    let commit = Commit {
        events: events.clone(),
        ..header_commit(0, 1)
    };
    assert_eq!(commit.record_count(), MAX_COMMIT_RECORDS);
    store
        .commit(&key, commit)
        .await
        .expect("a commit of 89 events");
    assert_eq!(
        store.list_events(&key, None, 1000).await.expect("list"),
        events,
        "in creation order"
    );
    // Replayed ids are skipped, new ones appended after.
    let mut again = events[80..].to_vec();
    again.push(event(&key, "evt-new", json!({})));
    store
        .commit(
            &key,
            Commit {
                events: again,
                ..header_commit(1, 2)
            },
        )
        .await
        .expect("commit");
    let listed = store
        .list_events(&key, Some(&events[88].id), 1000)
        .await
        .expect("list after the last of the first commit");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, "evt-new");
    // Too many records: refused, nothing written.
    let too_many = Commit {
        events: (0..MAX_COMMIT_RECORDS)
            .map(|n| event(&key, &format!("big-{n}"), json!({})))
            .collect(),
        ..header_commit(2, 3)
    };
    assert!(matches!(
        store.commit(&key, too_many).await,
        Err(StoreError::Failed(_))
    ));
    assert_eq!(store.applied_sequence(&key).await.expect("applied"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_queues_receive_in_batches_and_fifo_sends_are_never_dropped() {
    let stack = Stack::new("queues").await;
    let run = Run::new("queues");

    // A standard queue: more than one ReceiveMessage batch (10) in one receive.
    let standard = stack.recalc_queue();
    assert!(!standard.is_fifo());
    let keys: Vec<InstanceKey> = (0..14).map(|n| run.key("p", &format!("s{n}"))).collect();
    for k in &keys {
        standard
            .send(&Message::ProcessInstance { key: k.clone() })
            .await
            .expect("send");
    }
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while got.len() < keys.len() && tokio::time::Instant::now() < deadline {
        got.extend(
            standard
                .receive(keys.len(), Duration::from_secs(30))
                .await
                .expect("receive"),
        );
    }
    assert_eq!(got.len(), keys.len(), "every message, once");
    for r in &got {
        standard.ack(&r.receipt).await.expect("ack");
    }

    // FIFO: a wake-up sent after an identical one was received is delivered (a
    // deduplication id per content would drop it for five minutes).
    let fifo = stack.process_queue();
    assert!(fifo.is_fifo());
    let wake = Message::ProcessInstance {
        key: run.key("p", "f"),
    };
    fifo.send(&wake).await.expect("send");
    let first = fifo
        .receive(10, Duration::from_secs(30))
        .await
        .expect("receive");
    assert_eq!(first.len(), 1);
    fifo.send(&wake)
        .await
        .expect("send while the first is in flight");
    fifo.ack(&first[0].receipt).await.expect("ack");
    let second = fifo
        .receive(10, Duration::from_secs(30))
        .await
        .expect("receive");
    assert_eq!(second.len(), 1, "the second wake-up is delivered");
    assert_eq!(second[0].message, wake);
    assert_eq!(second[0].receive_count, 1);
    fifo.ack(&second[0].receipt).await.expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_errors_map_onto_store_errors() {
    let stack = Stack::new("errors").await;
    let run = Run::new("errors");
    // A table that does not exist: a permanent failure that names the cause.
    let missing = DynamoStore::new(stack.dynamodb(), "no-such-table");
    match missing.get_project(&run.project("p")).await {
        Err(StoreError::Failed(m)) => {
            assert!(
                m.contains("get_project") && m.contains("ResourceNotFound"),
                "{m}"
            )
        }
        other => panic!("a missing table is Failed: {other:?}"),
    }
    // Nothing listening: transient.
    let sdk = pricing_aws::emulator::emulator_sdk_config("http://127.0.0.1:9").await;
    let unreachable = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), "t");
    match unreachable.last_sequence(&run.key("p", "i")).await {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("last_sequence"), "{m}"),
        other => panic!("an unreachable endpoint is Unavailable: {other:?}"),
    }
    // Conflicts where the ports say so.
    let store = stack.store();
    let p = pricing_contract::fixtures::project(&run.project_id("p"), &run.tenant("t"), "P");
    store.create_project(&p).await.expect("create");
    assert!(matches!(
        store.create_project(&p).await,
        Err(StoreError::Conflict(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_message_carries_the_trace_of_the_work_that_sent_it() {
    let stack = Stack::new("trace").await;
    let run = Run::new("trace");
    let trace = "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1";
    for queue in [stack.process_queue(), stack.recalc_queue()] {
        let message = Message::ProcessInstance {
            key: run.key("p", "traced"),
        };
        queue
            .send_traced(&message, Some(trace))
            .await
            .expect("send");
        queue.send_traced(&message, None).await.expect("send");
        // As the Lambda event source reads them: with the system attributes.
        let client = aws_sdk_sqs::Client::new(&stack.sdk);
        let url = if queue.is_fifo() {
            &stack.config.process_queue_url
        } else {
            &stack.config.recalc_queue_url
        };
        let mut headers = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while headers.len() < 2 && tokio::time::Instant::now() < deadline {
            let out = client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            for m in out.messages() {
                headers.push(
                    m.attributes()
                        .and_then(|a| {
                            a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::AwsTraceHeader)
                        })
                        .cloned(),
                );
                client
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
        assert_eq!(headers, [Some(trace.to_owned()), None], "{url}");
    }
}

/// A page of the latest prices reads only the parts that hold it, by the head's `counts`;
/// a head written before the counts pages the whole list instead, to the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_the_latest_prices_reads_its_parts_and_old_heads_still_page() {
    use pricing_contract::fixtures::{calculated, calculation};
    use pricing_core::ports::PriceStore;
    use pricing_core::pricing::Trigger;

    let stack = Stack::new("latest-page").await;
    let store = stack.store();
    let key = Run::new("latest-page").key("p", "i");
    let prices = (0..3_000)
        .map(|n| calculated(&format!("seat-{n:05}"), 10.0 + (n % 40) as f64, None))
        .collect();
    let c = calculation("calc-1", 1, Trigger::Request, prices);
    assert!(store.save_calculation(&key, &c, &[]).await.expect("save"));
    let pk = format!("I#{}/{}", key.project_storage_key(), key.instance_id);
    let table = &stack.config.table_name;
    let head = stack
        .dynamodb()
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.clone()))
        .key("sk", AttributeValue::S("~P#HEAD".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get_item")
        .item
        .expect("a head");
    let counts = head["counts"].as_s().expect("counts").clone();
    assert!(
        counts.contains(','),
        "3,000 explained prices take several parts: {counts}"
    );
    let expected = |offset: usize, limit: usize| -> Vec<_> {
        c.prices
            .iter()
            .skip(offset)
            .take(limit)
            .map(|p| (p.item_id.clone(), p.price))
            .collect()
    };
    let check_pages = || async {
        for (offset, limit) in [(0, 3_000), (0, 5), (1_234, 900), (2_990, 50), (3_000, 1)] {
            let page = store
                .latest_prices_page(&key, offset, limit)
                .await
                .expect("page")
                .expect("a latest");
            assert_eq!(page.prices, expected(offset, limit), "{offset}, {limit}");
            assert_eq!((page.total, page.sequence), (3_000, 1));
        }
    };
    check_pages().await;
    // The head as it was written before the counts.
    stack
        .dynamodb()
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk))
        .key("sk", AttributeValue::S("~P#HEAD".into()))
        .update_expression("REMOVE counts")
        .send()
        .await
        .expect("update_item");
    check_pages().await;
}
