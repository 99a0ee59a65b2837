//! `entries.rejected` events on DynamoDB (the emulator enforces the 400 KB item limit):
//! a processing run with many long rejections commits, and the instance keeps committing.

mod common;

use common::Stack;
use pricing_contract::fixtures::{Run, header, instance};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::NewEntry;
use pricing_core::ports::{EntryLog, EventStore, InstanceStore, StateStore};
use pricing_core::process::Processor;
use pricing_core::process::rejected::{MAX_EVENT_BYTES, MAX_MESSAGE_BYTES};
use pricing_core::time::Timestamp;
use serde_json::{Value, json};

fn signed(signer: &Signer, tid: &str, entry: &Value) -> NewEntry {
    NewEntry {
        transaction_id: Some(pricing_contract::fixtures::transaction_id(tid)),
        received_at: Timestamp::now(),
        jwt: signer.sign_jws(entry.to_string().as_bytes()),
    }
}

/// Issue 9, item 3: one run's 1,000 rejections with 128-character transaction ids and long
/// messages made one event item of over a megabyte; DynamoDB refused the commit on every
/// retry and the instance never committed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_long_rejections_commit_and_the_instance_keeps_committing() {
    let stack = Stack::new("rejections").await;
    let store = stack.store();
    let run = Run::new("rejections");
    let key = run.key("p", "i");
    store
        .create_instance(&instance(&key, "I"), &header(0, json!({})))
        .await
        .expect("create_instance");
    let key_material = StoredKey::generate("k-test".into(), Timestamp::now()).expect("a key");
    let signer = Signer::from_keys(&[key_material]).expect("a signer");
    let tid = |n: usize| format!("{n:x>128}");
    let entries: Vec<NewEntry> = (1..=1000)
        .map(|n| {
            // Fails (the path does not exist); the message repeats the long path.
            let path = format!("/missing-{n}/{}", "segment/".repeat(200));
            let entry = json!({"type": "instanceMetadata",
                               "data": {"patch": [{"op": "remove", "path": path}]}});
            signed(&signer, &tid(n), &entry)
        })
        .collect();
    for chunk in entries.chunks(250) {
        store.append(&key, chunk.to_vec()).await.expect("append");
    }

    let report = Processor::new()
        .process(&store, &store, &key, Timestamp::now())
        .await
        .expect("the run with 1,000 long rejections commits");
    assert_eq!((report.applied, report.rejected), (0, 1000));
    assert_eq!(store.applied_sequence(&key).await.expect("applied"), 1000);

    let mut events = Vec::new();
    loop {
        let after = events
            .last()
            .map(|e: &pricing_core::model::Event| e.id.clone());
        let page = store
            .list_events(&key, after.as_deref(), 100)
            .await
            .expect("list_events");
        if page.is_empty() {
            break;
        }
        events.extend(page);
    }
    assert!(events.len() > 1, "several events: {}", events.len());
    let mut sequences = Vec::new();
    for e in &events {
        assert_eq!(e.event_type, "entries.rejected");
        let bytes = serde_json::to_vec(e).expect("encode").len();
        assert!(bytes <= MAX_EVENT_BYTES, "an event of {bytes} bytes");
        for err in e.data["errors"].as_array().expect("errors") {
            let sequence = err["sequence"].as_u64().expect("a sequence");
            assert_eq!(err["transactionId"], tid(sequence as usize));
            let message = err["message"].as_str().expect("a message");
            assert!(message.len() <= MAX_MESSAGE_BYTES);
            sequences.push(sequence);
        }
    }
    assert_eq!(
        sequences,
        (1..=1000).collect::<Vec<_>>(),
        "none lost, order kept"
    );

    // The instance keeps committing.
    let after = json!({"type": "instanceMetadata", "data": {"update": {"name": "after"}}});
    store
        .append(&key, vec![signed(&signer, "after", &after)])
        .await
        .expect("append");
    let report = Processor::new()
        .process(&store, &store, &key, Timestamp::now())
        .await
        .expect("a later entry commits");
    assert_eq!((report.applied, report.rejected), (1, 0));
    let state = store.load_state(&key).await.expect("load_state");
    assert_eq!(state.header.applied_seq, 1001);
    assert_eq!(state.header.meta.get("name"), Some(&json!("after")));
}
