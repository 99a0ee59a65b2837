//! The retention policy on AWS (issue 12, item 3): the items the store writes carry the
//! table's TTL attribute (`expires_at`, epoch seconds) exactly when the policy lets them
//! go, never on what a guarantee needs (the latest calculation, an item's latest history
//! entry, an open delivery); the table provisioned from template.yaml has TTL on that
//! attribute; and reads skip what TTL deleted (DynamoDB deletes expired items one by
//! one, in no order), as the standalone's pruning leaves them.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TimeToLiveStatus};
use common::Stack;
use pricing_aws::{DynamoStore, TTL_ATTRIBUTE};
use pricing_contract::fixtures::{
    Run, attempt, calculated, calculation, delivery, event, kept, plus, subscription,
};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{Event, PageRequest};
use pricing_core::ports::{DeliveryStore, EventStore, PriceStore};
use pricing_core::pricing::Trigger;
use pricing_core::retention::Retention;
use pricing_core::time::Timestamp;
use serde_json::json;

type Item = HashMap<String, AttributeValue>;

const DAY: i64 = 86_400;

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

async fn delete(stack: &Stack, pk: &str, sk: &str) {
    stack
        .dynamodb()
        .delete_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .send()
        .await
        .expect("delete_item");
}

/// The TTL attribute of an item (`None`: it never expires).
fn ttl(item: &Item) -> Option<i64> {
    item.get(TTL_ATTRIBUTE)
        .map(|v| v.as_n().expect("a number").parse().expect("epoch seconds"))
}

fn secs(t: Timestamp) -> i64 {
    t.millis().div_euclid(1000)
}

fn instance_pk(key: &InstanceKey) -> String {
    format!("I#{}/{}", key.project_storage_key(), key.instance_id)
}

async fn store(stack: &Stack) -> DynamoStore {
    stack.store().with_retention(Retention::default())
}

#[tokio::test]
async fn the_table_from_the_template_expires_items_on_expires_at() {
    let stack = Stack::new("retention-ttl").await;
    let ttl = stack
        .dynamodb()
        .describe_time_to_live()
        .table_name(&stack.config.table_name)
        .send()
        .await
        .expect("describe_time_to_live")
        .time_to_live_description
        .expect("a TTL description");
    assert_eq!(ttl.attribute_name(), Some(TTL_ATTRIBUTE));
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
}

/// A replaced calculation's marker expires the calculation retention after it was
/// replaced; the latest's never. A history entry expires the horizon after its own time
/// once its item has a newer entry; an item's latest entry never (it explains the
/// current price).
#[tokio::test]
async fn calculations_and_history_expire_only_once_replaced() {
    let stack = Stack::new("retention-prices").await;
    let store = store(&stack).await;
    let run = Run::new("retention-prices");
    let key = run.key("p", "i");
    let pk = instance_pk(&key);
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
    // a changes in both calculations; d only in the first (kept in the second).
    let mut first = calculation(
        "calc-1",
        1,
        Trigger::Schedule,
        vec![calculated("a", 10.0, None), calculated("d", 7.0, None)],
    );
    first.calculated_at = t0;
    assert!(store.save_calculation(&key, &first, &[]).await.unwrap());
    let marker = raw(&stack, &pk, "~P#C#calc-1").await.expect("marker");
    assert_eq!(ttl(&marker), None, "the latest calculation never expires");
    let entry = raw(&stack, &pk, &format!("~P#H#a#{:020}", 1))
        .await
        .expect("history entry");
    assert_eq!(ttl(&entry), None, "an item's latest entry never expires");

    let mut second = calculation(
        "calc-2",
        2,
        Trigger::Schedule,
        vec![calculated("a", 11.0, Some(10.0)), kept("d", 7.0)],
    );
    second.calculated_at = plus(t0, DAY);
    let before = secs(Timestamp::now());
    assert!(store.save_calculation(&key, &second, &[]).await.unwrap());
    let after = secs(Timestamp::now());
    // The replaced marker: 90 days from when it was replaced.
    let replaced = ttl(&raw(&stack, &pk, "~P#C#calc-1").await.expect("marker")).expect("a TTL");
    assert!(
        (before + 90 * DAY..=after + 90 * DAY).contains(&replaced),
        "{replaced} not 90 days after {before}..{after}"
    );
    assert_eq!(
        ttl(&raw(&stack, &pk, "~P#C#calc-2").await.expect("marker")),
        None
    );
    // a's first entry: 180 days after its own time; its second, d's only: none.
    let entry = |item: &str, seq: u64| format!("~P#H#{item}#{seq:020}");
    assert_eq!(
        ttl(&raw(&stack, &pk, &entry("a", 1)).await.expect("entry")),
        Some(secs(t0) + 180 * DAY)
    );
    assert_eq!(
        ttl(&raw(&stack, &pk, &entry("a", 2)).await.expect("entry")),
        None
    );
    assert_eq!(
        ttl(&raw(&stack, &pk, &entry("d", 1)).await.expect("entry")),
        None
    );
    // Once TTL deleted a's first entry, the history starts at the second.
    delete(&stack, &pk, &entry("a", 1)).await;
    let page = PageRequest {
        cursor: None,
        limit: 10,
    };
    let item = pricing_contract::fixtures::item_id("a");
    let history = store.price_history(&key, &item, &page).await.unwrap();
    assert_eq!(
        history.items.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        store
            .latest_prices(&key)
            .await
            .unwrap()
            .map(|c| c.calculation_id),
        Some("calc-2".into())
    );

    // Kept for ever: nothing carries a TTL.
    let forever = stack.store().with_retention(Retention::FOREVER);
    let mut third = calculation(
        "calc-3",
        3,
        Trigger::Schedule,
        vec![calculated("a", 12.0, Some(11.0)), kept("d", 7.0)],
    );
    third.calculated_at = plus(t0, 2 * DAY);
    assert!(forever.save_calculation(&key, &third, &[]).await.unwrap());
    assert_eq!(
        ttl(&raw(&stack, &pk, "~P#C#calc-2").await.expect("marker")),
        None
    );
    assert_eq!(
        ttl(&raw(&stack, &pk, &entry("a", 2)).await.expect("entry")),
        None
    );
}

async fn put(stack: &Stack, item: Item) {
    stack
        .dynamodb()
        .put_item()
        .table_name(&stack.config.table_name)
        .set_item(Some(item))
        .send()
        .await
        .expect("put_item");
}

/// A save cut off after its transaction (a crash, the function's 30 s timeout, a history
/// write that failed) is finished by the next `has_calculation`, which every redelivered
/// message asks before it calculates, and by a replayed save: the history, the done flag,
/// and the retirement of the calculation it replaced (its marker's TTL, its parts
/// deleted). Before, the redelivered message was answered "stored" and nothing finished
/// it: the changed prices had no history, and the replaced calculation was kept for ever.
#[tokio::test]
async fn an_interrupted_save_is_finished_and_retires_what_it_replaced() {
    let stack = Stack::new("retention-replay").await;
    let store = store(&stack).await;
    let run = Run::new("retention-replay");
    let key = run.key("p", "i");
    let pk = instance_pk(&key);
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
    let mut first = calculation(
        "calc-1",
        1,
        Trigger::Schedule,
        vec![calculated("a", 10.0, None)],
    );
    first.calculated_at = t0;
    assert!(store.save_calculation(&key, &first, &[]).await.unwrap());
    let part = raw(&stack, &pk, "~P#S#calc-1#0000").await.expect("a part");
    let mut second = calculation(
        "calc-2",
        2,
        Trigger::Schedule,
        vec![calculated("a", 11.0, Some(10.0))],
    );
    second.calculated_at = plus(t0, DAY);
    assert!(store.save_calculation(&key, &second, &[]).await.unwrap());
    let entry = |seq: u64| format!("~P#H#a#{seq:020}");
    // What a save of calc-2 cut off after its transaction leaves: calc-2 not done and no
    // history entry of it, a's first entry without its TTL, calc-1 neither expiring nor
    // without its parts.
    let interrupt = || async {
        let mut marker = raw(&stack, &pk, "~P#C#calc-2").await.expect("marker");
        marker.insert("done".into(), AttributeValue::Bool(false));
        put(&stack, marker).await;
        delete(&stack, &pk, &entry(2)).await;
        let mut earlier = raw(&stack, &pk, &entry(1)).await.expect("entry");
        earlier.remove(TTL_ATTRIBUTE);
        put(&stack, earlier).await;
        let mut replaced = raw(&stack, &pk, "~P#C#calc-1").await.expect("marker");
        replaced.remove(TTL_ATTRIBUTE);
        put(&stack, replaced).await;
        put(&stack, part.clone()).await;
    };
    let finished = || async {
        let marker = raw(&stack, &pk, "~P#C#calc-2").await.expect("marker");
        assert_eq!(marker.get("done"), Some(&AttributeValue::Bool(true)));
        assert!(raw(&stack, &pk, &entry(2)).await.is_some(), "its history");
        let earlier = raw(&stack, &pk, &entry(1)).await.expect("entry");
        assert_eq!(ttl(&earlier), Some(secs(t0) + 180 * DAY));
        let replaced = raw(&stack, &pk, "~P#C#calc-1").await.expect("marker");
        assert!(ttl(&replaced).is_some(), "the replaced marker expires");
        assert!(
            raw(&stack, &pk, "~P#S#calc-1#0000").await.is_none(),
            "the replaced parts are deleted"
        );
    };
    interrupt().await;
    assert!(store.has_calculation(&key, "calc-2").await.unwrap());
    finished().await;
    interrupt().await;
    assert!(!store.save_calculation(&key, &second, &[]).await.unwrap());
    finished().await;
}

/// Events and their batch expire the event retention after they were written; a listing
/// skips an event TTL deleted from a batch past its retention, and still reports one
/// missing from a batch that is not (damage).
#[tokio::test]
async fn events_expire_and_reads_skip_what_ttl_deleted() {
    let stack = Stack::new("retention-events").await;
    let store = store(&stack).await;
    let run = Run::new("retention-events");
    let key = run.key("p", "i");
    let pk = instance_pk(&key);
    let events: Vec<Event> = (1..=3)
        .map(|n| event(&key, &format!("evt-{n}"), json!({"n": n})))
        .collect();
    let before = secs(Timestamp::now());
    store.append_events(&key, &events[..2]).await.unwrap();
    store.append_events(&key, &events[2..]).await.unwrap();
    let after = secs(Timestamp::now());
    for sk in ["EVENT#evt-1", "EVENT#evt-3", &format!("EVLOG#{:020}", 1)] {
        let t = ttl(&raw(&stack, &pk, sk).await.expect("stored")).expect("a TTL");
        assert!(
            (before + 90 * DAY..=after + 90 * DAY).contains(&t),
            "{sk}: {t} not 90 days after {before}..{after}"
        );
    }
    // Batch 1 past its retention, evt-1 deleted by TTL, its batch not yet.
    stack
        .dynamodb()
        .update_item()
        .table_name(&stack.config.table_name)
        .key("pk", AttributeValue::S(pk.clone()))
        .key("sk", AttributeValue::S(format!("EVLOG#{:020}", 1)))
        .update_expression("SET expires_at = :past")
        .expression_attribute_values(":past", AttributeValue::N((before - DAY).to_string()))
        .send()
        .await
        .unwrap();
    delete(&stack, &pk, "EVENT#evt-1").await;
    let listed = store.list_events(&key, None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["evt-2", "evt-3"]
    );
    // evt-3's batch is within its retention: a missing event there is damage.
    delete(&stack, &pk, "EVENT#evt-3").await;
    assert!(store.list_events(&key, None, 10).await.is_err());
}

/// A delivery's event and listing entry expire the retention (plus the retry window)
/// after its creation; its state only once it is final, the retention after its last
/// attempt; an open delivery's state never. What TTL deleted reads as gone.
#[tokio::test]
async fn deliveries_expire_once_final() {
    let stack = Stack::new("retention-deliveries").await;
    let store = store(&stack).await;
    let run = Run::new("retention-deliveries");
    let key = run.key("p", "i");
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
    let sub = subscription(run.subscription_id("s"), &key.project(), None, t0);
    let done = delivery(&key, &sub, "evt-done", t0);
    let open = delivery(&key, &sub, "evt-open", plus(t0, 1));
    store
        .create_deliveries(&[done.clone(), open.clone()])
        .await
        .unwrap();
    let state = |d: &pricing_core::webhooks::Delivery| format!("D#{}", d.webhook_id);
    let expected = secs(t0) + 32 * DAY;
    assert_eq!(
        ttl(&raw(&stack, &state(&done), "EVENT").await.expect("event")),
        Some(expected)
    );
    assert_eq!(
        ttl(&raw(&stack, &state(&done), "DELIVERY").await.expect("state")),
        None
    );
    let last = plus(t0, 300);
    assert!(
        store
            .record_attempt(&done.webhook_id, &attempt(1, last, None, true))
            .await
            .unwrap()
    );
    assert!(
        store
            .record_attempt(
                &open.webhook_id,
                &attempt(1, last, Some(plus(last, 300)), false)
            )
            .await
            .unwrap()
    );
    assert_eq!(
        ttl(&raw(&stack, &state(&done), "DELIVERY").await.expect("state")),
        Some(secs(last) + 30 * DAY)
    );
    assert_eq!(
        ttl(&raw(&stack, &state(&open), "DELIVERY").await.expect("state")),
        None,
        "a delivery that will be retried never expires"
    );
    let page = PageRequest {
        cursor: None,
        limit: 10,
    };
    let project = key.project();
    assert_eq!(
        store
            .list_deliveries(&project, &sub.subscription_id, &page)
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    // TTL deleted the final delivery's state first: the listing skips it.
    delete(&stack, &state(&done), "DELIVERY").await;
    let listed = store
        .list_deliveries(&project, &sub.subscription_id, &page)
        .await
        .unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|d| d.webhook_id.as_str())
            .collect::<Vec<_>>(),
        [open.webhook_id.as_str()]
    );
    assert_eq!(store.get_delivery(&done.webhook_id).await.unwrap(), None);
}

/// A final delivery whose event TTL deleted first reads as gone (an error report on it
/// is then a 404), not as damage.
#[tokio::test]
async fn a_final_delivery_without_its_event_is_gone() {
    let stack = Stack::new("retention-delivery-event").await;
    let store = store(&stack).await;
    let run = Run::new("retention-delivery-event");
    let key = run.key("p", "i");
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
    let sub = subscription(run.subscription_id("s"), &key.project(), None, t0);
    let d = delivery(&key, &sub, "evt-x", t0);
    store
        .create_deliveries(std::slice::from_ref(&d))
        .await
        .unwrap();
    let pk = format!("D#{}", d.webhook_id);
    // Open: a missing event is damage.
    delete(&stack, &pk, "EVENT").await;
    assert!(store.get_delivery(&d.webhook_id).await.is_err());
    store
        .record_attempt(&d.webhook_id, &attempt(1, t0, None, false))
        .await
        .unwrap();
    assert_eq!(store.get_delivery(&d.webhook_id).await.unwrap(), None);
}
