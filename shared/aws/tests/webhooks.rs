//! The webhook-related parts of the DynamoDB layout that the contract suites cannot see:
//! the outbox index entry on `EVENTS` under concurrent writers and dispatchers, the size of
//! what an attempt rewrites, the subscription counters, and a dispatch through the stack's
//! queues (docs/aws.md).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::Stack;
use pricing_aws::DynamoStore;
use pricing_contract::fixtures::{Run, attempt, client_report, event, subscription};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{Event, Message};
use pricing_core::ports::{DeliveryStore, EventStore, SubscriptionStore, WorkQueue};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::MAX_CLIENT_REPORTS;
use pricing_core::webhooks::{Delivery, DeliveryStatus, MAX_ATTEMPTS, dispatch};
use serde_json::json;

type Item = HashMap<String, AttributeValue>;

async fn raw(stack: &Stack, pk: &str, sk: &str) -> Option<Item> {
    stack
        .dynamodb()
        .get_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get_item")
        .item
}

fn instance_pk(key: &InstanceKey) -> String {
    format!("I#{}", key.storage_key())
}

/// The outbox index entry on the instance's `EVENTS` item.
async fn outbox_entry(stack: &Stack, key: &InstanceKey) -> Option<String> {
    let item = raw(stack, &instance_pk(key), "EVENTS").await?;
    item.get("gsi1pk")
        .and_then(|v| v.as_s().ok())
        .map(|pk| format!("{pk} {}", item["gsi1sk"].as_s().expect("gsi1sk")))
}

async fn listed(store: &DynamoStore, key: &InstanceKey) -> bool {
    store
        .instances_with_undispatched_events(10_000)
        .await
        .expect("instances_with_undispatched_events")
        .contains(key)
}

async fn undispatched(store: &DynamoStore, key: &InstanceKey) -> Vec<Event> {
    store
        .undispatched_events(key, 10_000)
        .await
        .expect("undispatched_events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_entry_follows_event_writes_and_the_mark() {
    let stack = Stack::new("outbox").await;
    let store = stack.store();
    let run = Run::new("outbox");
    let key = run.key("p", "i");
    assert_eq!(outbox_entry(&stack, &key).await, None);

    let events: Vec<Event> = (0..3)
        .map(|n| event(&key, &format!("e{n}"), json!({})))
        .collect();
    store.append_events(&key, &events).await.expect("append");
    let entry = outbox_entry(&stack, &key).await.expect("an entry");
    assert!(
        entry.starts_with("OUTBOX#") && entry.ends_with(&format!(" {}", instance_pk(&key))),
        "{entry}"
    );
    store.mark_dispatched(&key, "e1").await.expect("mark");
    assert!(
        outbox_entry(&stack, &key).await.is_some(),
        "a mark short of the newest event keeps the entry"
    );
    store.mark_dispatched(&key, "e2").await.expect("mark");
    assert_eq!(
        outbox_entry(&stack, &key).await,
        None,
        "the mark on the newest event removes it"
    );
    // Re-appending stored events writes nothing, so the entry stays away.
    store.append_events(&key, &events).await.expect("append");
    assert_eq!(outbox_entry(&stack, &key).await, None);
    store
        .append_events(&key, &[event(&key, "e3", json!({}))])
        .await
        .expect("append");
    assert!(outbox_entry(&stack, &key).await.is_some());
    assert!(listed(&store, &key).await);

    // A stale entry (as if its removal had been lost) is cleared by the listing.
    store.mark_dispatched(&key, "e3").await.expect("mark");
    let table = &stack.config.table_name;
    stack
        .dynamodb()
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(instance_pk(&key)))
        .key("sk", AttributeValue::S("EVENTS".into()))
        .update_expression("SET gsi1pk = :o, gsi1sk = :k")
        .expression_attribute_values(
            ":o",
            AttributeValue::S(entry.split(' ').next().expect("pk").into()),
        )
        .expression_attribute_values(":k", AttributeValue::S(instance_pk(&key)))
        .send()
        .await
        .expect("put a stale entry back");
    assert!(
        !listed(&store, &key).await,
        "a caught-up instance is not listed"
    );
    assert_eq!(
        outbox_entry(&stack, &key).await,
        None,
        "and its stale entry is gone"
    );
}

/// Writers append events while two dispatchers mark them: whenever all stop, the instance
/// is listed exactly when it has undispatched events (the entry's removal is conditioned
/// on the batch counter, so a batch landing in between keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_racing_with_event_writes_never_lose_the_outbox_entry() {
    let stack = Stack::new("outbox-race").await;
    let store = stack.store();
    let run = Run::new("outbox-race");
    let key = run.key("p", "i");
    for round in 0..6 {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = |w: usize| {
            let (store, key) = (store.clone(), key.clone());
            async move {
                for n in 0..(4 + round) {
                    let e = event(&key, &format!("r{round}-w{w}-e{n}"), json!({}));
                    store.append_events(&key, &[e]).await.expect("append");
                }
            }
        };
        let dispatcher = || {
            let (store, key, stop) = (store.clone(), key.clone(), stop.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let pending = store.undispatched_events(&key, 2).await.expect("read");
                    if let Some(last) = pending.last() {
                        store.mark_dispatched(&key, &last.id).await.expect("mark");
                    } else {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        };
        let writers = [0, 1, 2].map(|w| tokio::spawn(writer(w)));
        let dispatchers = [tokio::spawn(dispatcher()), tokio::spawn(dispatcher())];
        for w in writers {
            w.await.expect("writer");
        }
        stop.store(true, Ordering::SeqCst);
        for d in dispatchers {
            d.await.expect("dispatcher");
        }
        let behind = !undispatched(&store, &key).await.is_empty();
        assert_eq!(
            listed(&store, &key).await,
            behind,
            "round {round}: listed iff events are undispatched"
        );
        assert_eq!(outbox_entry(&stack, &key).await.is_some(), behind);
        // Catch up: the entry goes.
        while let Some(last) = undispatched(&store, &key).await.last() {
            store.mark_dispatched(&key, &last.id).await.expect("mark");
        }
        assert!(!listed(&store, &key).await);
        assert_eq!(outbox_entry(&stack, &key).await, None);
    }
}

/// A `prices.updated` part of 1,000 prices: the event is ~100 KB, stored once; attempts
/// and client reports rewrite only the small state item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_delivery_keeps_its_state_item_small() {
    let stack = Stack::new("large-delivery").await;
    let store = stack.store();
    let run = Run::new("large-delivery");
    let key = run.key("p", "i");
    let now = Timestamp::now();
    let sub = subscription(run.subscription_id("s"), &key.project(), None, now);
    let prices: Vec<_> = (0..1000)
        .map(|n| {
            json!({"itemId": format!("item-{n:05}-with-a-longer-name"), "price": 1234.5678,
                   "previousPrice": 1200.25, "changed": true})
        })
        .collect();
    let big = Event {
        id: "evt-big".into(),
        event_type: "prices.updated".into(),
        project_id: key.project_id.clone(),
        instance_id: key.instance_id.clone(),
        created_at: now,
        data: json!({"calculationId": "c", "trigger": "schedule", "calculatedAt": now,
                     "sequence": 1, "part": 1, "parts": 1, "prices": prices}),
    };
    let event_bytes = serde_json::to_string(&big).expect("json").len();
    assert!(event_bytes > 90_000, "{event_bytes}");
    let d = Delivery::new(&big, &sub, now);
    assert_eq!(
        store
            .create_deliveries(std::slice::from_ref(&d))
            .await
            .expect("create"),
        vec![d.webhook_id.clone()]
    );
    let mut expected = d.clone();
    for n in 1..MAX_ATTEMPTS {
        let u = attempt(n, now, Some(now), false);
        assert_eq!(store.record_attempt(&d.webhook_id, &u).await, Ok(true));
        u.apply(&mut expected);
    }
    let last = attempt(MAX_ATTEMPTS, now, None, false);
    assert_eq!(store.record_attempt(&d.webhook_id, &last).await, Ok(true));
    last.apply(&mut expected);
    for n in 0..MAX_CLIENT_REPORTS {
        let r = client_report(&"x".repeat(900 + n), now);
        store
            .add_client_report(&d.webhook_id, &r)
            .await
            .expect("report");
        expected.client_reports.push(r);
    }
    assert_eq!(expected.status, DeliveryStatus::Failed);
    assert_eq!(
        store
            .get_delivery(&d.webhook_id)
            .await
            .expect("get")
            .as_ref(),
        Some(&expected)
    );
    let state = raw(&stack, &format!("D#{}", d.webhook_id), "DELIVERY")
        .await
        .expect("state item");
    let size: usize = state
        .iter()
        .map(|(k, v)| {
            k.len()
                + match v {
                    AttributeValue::S(s) => s.len(),
                    AttributeValue::L(l) => l.iter().map(|x| x.as_s().map_or(8, String::len)).sum(),
                    _ => 8,
                }
        })
        .sum();
    assert!(
        size < 40_000,
        "the state item holds no event: {size} bytes after every attempt and report"
    );
    assert!(
        !state.contains_key("gsi1pk"),
        "a failed delivery has left the due index"
    );
}

/// The per-scope counter equals what the scope lists, after racing creates and deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_counters_follow_creates_and_deletes() {
    let stack = Stack::new("sub-counters").await;
    let store = stack.store();
    let run = Run::new("sub-counters");
    let project = run.project("p");
    let now = Timestamp::now();
    let subs: Vec<_> = (0..8)
        .map(|n| {
            subscription(
                run.subscription_id(&format!("s{n}")),
                &project,
                Some("i"),
                now,
            )
        })
        .collect();
    for s in &subs[..4] {
        assert!(store.create_subscription(s, 6).await.expect("create"));
    }
    // Creates of the rest race with deletes of the first ones.
    let (creates, deletes) = tokio::join!(
        async {
            let mut won = 0;
            for s in &subs[4..] {
                if store.create_subscription(s, 6).await.expect("create") {
                    won += 1;
                }
            }
            won
        },
        async {
            let mut gone = 0;
            for s in &subs[..3] {
                if store
                    .delete_subscription(&project, &s.subscription_id)
                    .await
                    .expect("delete")
                {
                    gone += 1;
                }
            }
            gone
        }
    );
    assert_eq!(deletes, 3);
    let listed = store
        .list_subscriptions(
            &project,
            Some(&pricing_contract::fixtures::instance_id("i")),
        )
        .await
        .expect("list");
    assert_eq!(listed.len(), 4 - deletes + creates);
    assert!(listed.len() <= 6);
    let counter = raw(&stack, &format!("P#{}", project.storage_key()), "SUBN#I#i")
        .await
        .expect("counter");
    assert_eq!(
        counter["n"].as_n().expect("n"),
        &listed.len().to_string(),
        "the counter says what the scope lists"
    );
}

/// The core's dispatch on this store and the stack's queues: deliveries for the matching
/// subscriptions, one Deliver message each on the webhook queue, the outbox cleared; a
/// second dispatch creates and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_creates_deliveries_and_sends_them_to_the_webhook_queue() {
    let stack = Stack::new("dispatch").await;
    let store = stack.store();
    let queues = stack.queues();
    let run = Run::new("dispatch");
    let key = run.key("p", "i");
    let now = Timestamp::now();
    let project_level = subscription(run.subscription_id("a"), &key.project(), None, now);
    let mine = subscription(run.subscription_id("b"), &key.project(), Some("i"), now);
    let elsewhere = subscription(run.subscription_id("c"), &key.project(), Some("j"), now);
    for s in [&project_level, &mine, &elsewhere] {
        assert!(store.create_subscription(s, 20).await.expect("create"));
    }
    let events: Vec<Event> = (0..3)
        .map(|n| event(&key, &format!("e{n}"), json!({"n": n})))
        .collect();
    store.append_events(&key, &events).await.expect("append");
    assert!(listed(&store, &key).await);

    let report = dispatch(&store, &queues, &key, now)
        .await
        .expect("dispatch");
    assert_eq!(report.events, 3);
    assert_eq!(report.deliveries, 6, "two subscriptions want each event");
    assert!(!listed(&store, &key).await, "dispatched: out of the outbox");
    let again = dispatch(&store, &queues, &key, now)
        .await
        .expect("dispatch");
    assert_eq!((again.events, again.deliveries), (0, 0));

    let mut sent = Vec::new();
    let queue = stack.webhook_queue();
    for _ in 0..50 {
        for r in queue
            .receive(10, Duration::from_secs(60))
            .await
            .expect("receive")
        {
            match r.message {
                Message::Deliver { webhook_id } => sent.push(webhook_id),
                other => panic!("only deliveries on the webhook queue: {other:?}"),
            }
            queue.ack(&r.receipt).await.expect("ack");
        }
        if sent.len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sent.sort();
    let mut stored = Vec::new();
    for s in [&project_level, &mine, &elsewhere] {
        let page = store
            .list_deliveries(
                &key.project(),
                &s.subscription_id,
                &pricing_core::model::PageRequest {
                    cursor: None,
                    limit: 100,
                },
            )
            .await
            .expect("list");
        if s.subscription_id == elsewhere.subscription_id {
            assert!(
                page.items.is_empty(),
                "another instance's subscription gets nothing"
            );
        }
        stored.extend(page.items.into_iter().map(|d| d.webhook_id));
    }
    stored.sort();
    assert_eq!(sent, stored, "one Deliver message per created delivery");
    let overdue = store
        .overdue_deliveries(Timestamp::from_millis(now.millis() + 1).expect("t"), 100)
        .await
        .expect("overdue");
    assert_eq!(overdue.len(), 6, "new deliveries are due at once");
}

/// The webhook queue as provisioned from template.yaml: a message the consumer keeps
/// reporting failed with visibility 0 (a delivery that failed for good) is received
/// `maxReceiveCount` = 10 times (8 attempts and 2 of slack), then moves to the
/// dead-letter queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_failed_for_good_moves_to_the_dead_letter_queue_after_ten_receives() {
    let stack = Stack::new("webhook-dlq").await;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let url = &stack.config.webhook_queue_url;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .expect("queue attributes")
        .attributes
        .expect("attributes");
    let policy: serde_json::Value =
        serde_json::from_str(&attributes[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy])
            .expect("a JSON redrive policy");
    assert_eq!(policy["maxReceiveCount"].to_string(), "10", "{policy}");
    const { assert!(MAX_ATTEMPTS < 10, "every attempt fits the receive budget") };
    let dlq_name = policy["deadLetterTargetArn"]
        .as_str()
        .and_then(|arn| arn.rsplit(':').next())
        .expect("a queue ARN");
    let dlq_url = sqs
        .get_queue_url()
        .queue_name(dlq_name)
        .send()
        .await
        .expect("dead-letter queue URL")
        .queue_url
        .expect("url");
    let dlq = pricing_aws::SqsQueue::new(sqs.clone(), dlq_url);

    let queue = stack.webhook_queue();
    let message = Message::Deliver {
        webhook_id: "wh_failed_for_good".into(),
    };
    queue.send(&message).await.expect("send");
    let receive = |q: pricing_aws::SqsQueue| async move {
        for _ in 0..100 {
            if let Some(r) = q
                .receive(1, Duration::from_secs(60))
                .await
                .expect("receive")
                .pop()
            {
                return Some(r);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    };
    for n in 1..=10 {
        let r = receive(queue.clone()).await.expect("received again");
        assert_eq!(r.message, message);
        assert_eq!(r.receive_count, n);
        queue
            .retry_later(&r.receipt, Duration::ZERO)
            .await
            .expect("visibility 0");
    }
    // The 11th receive finds it over the limit: SQS moves it instead of handing it out.
    assert!(
        queue
            .receive(10, Duration::from_secs(60))
            .await
            .expect("receive")
            .is_empty(),
        "gone from the webhook queue"
    );
    let moved = receive(dlq).await.expect("in the dead-letter queue");
    assert_eq!(moved.message, message);
}
