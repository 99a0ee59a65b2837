//! The processor against fakes of the log and of a store with DynamoDB's size limits.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::rejected::{MAX_ERRORS_PER_EVENT, MAX_EVENT_BYTES, MAX_MESSAGE_BYTES};
use super::*;
use crate::ids::{InstanceId, ItemId, ProjectId, TransactionId};
use crate::model::Event;
use crate::state::{Header, ItemState, ProductState};

/// DynamoDB's limits on one item and one transaction.
const ITEM_LIMIT: usize = 400 * 1024;
const TRANSACTION_LIMIT: usize = 4 * 1024 * 1024;

struct Log(Vec<LogRecord>);

impl EntryLog for Log {
    async fn append(
        &self,
        _: &InstanceKey,
        _: Vec<crate::model::NewEntry>,
    ) -> StoreResult<Vec<crate::model::AppendOutcome>> {
        unreachable!("the processor only reads")
    }

    async fn read(&self, _: &InstanceKey, after: u64, limit: usize) -> StoreResult<Vec<LogRecord>> {
        Ok(self
            .0
            .iter()
            .filter(|r| r.sequence > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn last_sequence(&self, _: &InstanceKey) -> StoreResult<u64> {
        Ok(self.0.len() as u64)
    }
}

/// Keeps the last commit's state and every event; refuses a commit as DynamoDB would (an
/// item over 400 KB, a transaction over 4 MB or over the record limit).
#[derive(Default)]
struct LimitedStore {
    header: Mutex<Header>,
    items: Mutex<HashMap<ItemId, ItemState>>,
    products: Mutex<HashMap<ProductId, ProductState>>,
    events: Mutex<Vec<Event>>,
    commits: Mutex<u64>,
    loads: Mutex<u64>,
}

impl StateStore for LimitedStore {
    async fn load_state(&self, _: &InstanceKey) -> StoreResult<InstanceState> {
        *self.loads.lock().expect("lock") += 1;
        let mut state = InstanceState {
            header: self.header.lock().expect("lock").clone(),
            ..InstanceState::default()
        };
        state.items = self
            .items
            .lock()
            .expect("lock")
            .clone()
            .into_iter()
            .collect();
        state.products = self
            .products
            .lock()
            .expect("lock")
            .clone()
            .into_iter()
            .collect();
        Ok(state)
    }

    async fn applied_sequence(&self, _: &InstanceKey) -> StoreResult<u64> {
        Ok(self.header.lock().expect("lock").applied_seq)
    }

    async fn commit(&self, _: &InstanceKey, commit: Commit) -> StoreResult<()> {
        if commit.record_count() > MAX_COMMIT_RECORDS {
            return Err(StoreError::Failed("too many records".into()));
        }
        // Records weigh as their JSON (the AWS store's binary form is smaller).
        let mut total = serde_json::to_vec(&commit.header).expect("encode").len();
        for bytes in commit
            .items
            .iter()
            .map(|i| serde_json::to_vec(i).expect("encode").len())
            .chain(
                commit
                    .products
                    .iter()
                    .map(|p| serde_json::to_vec(p).expect("encode").len()),
            )
        {
            if bytes > ITEM_LIMIT {
                return Err(StoreError::Failed(format!("a record of {bytes} bytes")));
            }
            total += bytes;
        }
        for e in &commit.events {
            let bytes = serde_json::to_vec(e).expect("encode").len();
            if bytes > ITEM_LIMIT {
                return Err(StoreError::Failed(format!(
                    "Item size has exceeded the maximum allowed size: {bytes}"
                )));
            }
            total += bytes;
        }
        if total > TRANSACTION_LIMIT {
            return Err(StoreError::Failed(format!("transaction of {total} bytes")));
        }
        let mut header = self.header.lock().expect("lock");
        if header.applied_seq != commit.expected_applied {
            return Err(StoreError::Conflict("moved".into()));
        }
        *header = commit.header;
        let mut items = self.items.lock().expect("lock");
        for i in commit.items {
            items.insert(i.item_id.clone(), i);
        }
        let mut products = self.products.lock().expect("lock");
        for p in commit.products {
            products.insert(p.product_id.clone(), p);
        }
        self.events.lock().expect("lock").extend(commit.events);
        *self.commits.lock().expect("lock") += 1;
        Ok(())
    }
}

fn record(sequence: u64, transaction_id: String, payload: &Value) -> LogRecord {
    LogRecord {
        sequence,
        transaction_id: Some(TransactionId::parse(transaction_id).expect("a transaction id")),
        received_at: Timestamp::parse("2026-05-19T12:00:00Z").expect("a timestamp"),
        // The processor does not verify signatures.
        jwt: format!(
            "eyJhbGciOiJFUzI1NiJ9.{}.c2ln",
            URL_SAFE_NO_PAD.encode(payload.to_string())
        ),
    }
}

/// An `instanceMetadata` patch that fails at a long path: its rejection message repeats
/// the path.
fn failing_patch(n: u64) -> Value {
    let path = format!("/missing-{n}/{}", "segment/".repeat(200));
    json!({"type": "instanceMetadata", "data": {"patch": [{"op": "remove", "path": path}]}})
}

/// Issue 9, item 3: 1,000 rejections with 128-character transaction ids and long messages
/// were one `entries.rejected` event of over a megabyte; DynamoDB refuses such an item, so
/// the commit failed on every retry and the instance never committed again.
#[tokio::test]
async fn a_thousand_long_rejections_commit_in_bounded_events() {
    let key = InstanceKey::new(
        crate::ids::TenantId::from_claim("tenant").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    );
    let records: Vec<LogRecord> = (1..=1000)
        .map(|n| record(n, format!("{n:x>128}"), &failing_patch(n)))
        .collect();
    let log = Log(records);
    let store = LimitedStore::default();
    let now = Timestamp::parse("2026-05-19T12:00:01Z").expect("a timestamp");

    let report = Processor::new()
        .process(&log, &store, &key, now)
        .await
        .expect("the rejections commit");
    assert_eq!((report.applied, report.rejected), (0, 1000));
    assert_eq!(report.applied_seq, 1000);

    let events = store.events.lock().expect("lock").clone();
    assert!(events.len() > 1, "several events: {}", events.len());
    let mut sequences = Vec::new();
    let mut long_messages = 0;
    for e in &events {
        assert_eq!(e.event_type, "entries.rejected");
        let bytes = serde_json::to_vec(e).expect("encode").len();
        assert!(bytes <= MAX_EVENT_BYTES, "an event of {bytes} bytes");
        let errors = e.data["errors"].as_array().expect("errors");
        assert!((1..=MAX_ERRORS_PER_EVENT).contains(&errors.len()));
        for err in errors {
            let sequence = err["sequence"].as_u64().expect("a sequence");
            assert_eq!(err["transactionId"], format!("{sequence:x>128}"));
            assert_eq!(err["code"], "patchFailed");
            let message = err["message"].as_str().expect("a message");
            assert!(message.len() <= MAX_MESSAGE_BYTES, "{message}");
            if message.len() > 1000 {
                long_messages += 1;
            }
            sequences.push(sequence);
        }
    }
    assert_eq!(
        long_messages, 1000,
        "the messages are long (the case of the issue)"
    );
    assert_eq!(
        sequences,
        (1..=1000).collect::<Vec<_>>(),
        "none lost, order kept"
    );

    // The instance keeps committing afterwards.
    let mut records = log.0;
    records.push(record(
        1001,
        "after".into(),
        &json!({"type": "instanceMetadata", "data": {"update": {"name": "after"}}}),
    ));
    let report = Processor::new()
        .process(&Log(records), &store, &key, now)
        .await
        .expect("a later entry commits");
    assert_eq!((report.applied, report.rejected), (1, 0));
    assert_eq!(store.header.lock().expect("lock").applied_seq, 1001);
}

/// Rejections spread over many commits when they exceed what one commit may carry.
#[tokio::test]
async fn rejection_events_respect_the_bytes_of_a_commit() {
    let key = InstanceKey::new(
        crate::ids::TenantId::from_claim("tenant").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    );
    let records: Vec<LogRecord> = (1..=3000)
        .map(|n| record(n, format!("{n:x>128}"), &failing_patch(n)))
        .collect();
    let store = LimitedStore::default();
    let report = Processor::new()
        .process(&Log(records), &store, &key, Timestamp::now())
        .await
        .expect("the rejections commit");
    assert_eq!(report.rejected, 3000);
    assert!(report.commits >= 3, "{} commits", report.commits);
    let events = store.events.lock().expect("lock").clone();
    let count: usize = events
        .iter()
        .map(|e| e.data["errors"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(count, 3000);
}

/// Reads share the processor's warm state while it is current (one copy, no load), see
/// what a later run committed, and keep what they hold when a run changes the state under
/// them; a run never takes a stale read's copy for the current state.
#[tokio::test]
async fn reads_share_the_warm_state_and_see_every_commit() {
    let key = InstanceKey::new(
        crate::ids::TenantId::from_claim("tenant").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    );
    let rename = |n: u64| {
        record(
            n,
            format!("t{n}"),
            &json!({"type": "instanceMetadata", "data": {"update": {"name": format!("v{n}")}}}),
        )
    };
    let name = |state: &InstanceState| state.header.meta["name"].clone();
    let loads = |store: &LimitedStore| *store.loads.lock().expect("lock");
    let store = LimitedStore::default();
    let processor = Processor::new();

    // Before any run: loaded once, then shared.
    let first = processor.shared_state(&store, &key).await.expect("read");
    let again = processor.shared_state(&store, &key).await.expect("read");
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(loads(&store), 1);

    // A run takes the warm state (no load) and keeps what it committed; reads share that.
    let mut log = vec![rename(1)];
    processor
        .process(&Log(log.clone()), &store, &key, Timestamp::now())
        .await
        .expect("run");
    assert_eq!(loads(&store), 1, "the run started from the warm state");
    let read = processor.shared_state(&store, &key).await.expect("read");
    assert_eq!((read.header.applied_seq, name(&read)), (1, json!("v1")));
    assert!(Arc::ptr_eq(
        &read,
        &processor.shared_state(&store, &key).await.expect("read")
    ));
    assert_eq!(loads(&store), 1);

    // A run while a read holds the state: the read keeps what it read, the run commits.
    log.push(rename(2));
    processor
        .process(&Log(log.clone()), &store, &key, Timestamp::now())
        .await
        .expect("run");
    assert_eq!((read.header.applied_seq, name(&read)), (1, json!("v1")));
    let newer = processor.shared_state(&store, &key).await.expect("read");
    assert_eq!((newer.header.applied_seq, name(&newer)), (2, json!("v2")));
    assert_eq!(loads(&store), 1);

    // The store moved on without this processor (another writer): the warm state is
    // stale, so a read loads, and the next run starts from what is stored.
    log.push(rename(3));
    Processor::new()
        .process(&Log(log.clone()), &store, &key, Timestamp::now())
        .await
        .expect("another processor");
    let fresh = processor.shared_state(&store, &key).await.expect("read");
    assert_eq!((fresh.header.applied_seq, name(&fresh)), (3, json!("v3")));
    assert_eq!(
        loads(&store),
        3,
        "the other processor loaded once, this read once"
    );
    log.push(rename(4));
    let report = processor
        .process(&Log(log), &store, &key, Timestamp::now())
        .await
        .expect("run");
    assert_eq!((report.applied, report.applied_seq), (1, 4));
    let last = processor.shared_state(&store, &key).await.expect("read");
    assert_eq!(name(&last), json!("v4"));
}

/// Items with large metadata, registered in one batch: the processor commits before a
/// commit's records outgrow one AWS transaction (found by an outside review: only the
/// record count was bounded, and 70 items of 60 KB made a 4.2 MB commit that DynamoDB
/// refuses on every retry, so the instance's processing stopped for good).
#[tokio::test]
async fn records_of_large_documents_are_committed_within_a_transaction() {
    let key = InstanceKey::new(
        crate::ids::TenantId::from_claim("tenant").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    );
    let note = "n".repeat(60_000);
    let mut log = vec![record(
        1,
        "t1".into(),
        &json!({"type": "productRegistration", "data": {"productId": "P", "capacity": 1000}}),
    )];
    for n in 0..70u64 {
        log.push(record(
            n + 2,
            format!("t{}", n + 2),
            &json!({"type": "itemRegistration", "data": {"itemId": format!("i{n}"),
                "productId": "P",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 90, "default": 40},
                "metadata": {"note": note}}}),
        ));
    }
    let store = LimitedStore::default();
    let report = Processor::new()
        .process(&Log(log), &store, &key, Timestamp::now())
        .await
        .expect("every commit fits a transaction");
    assert_eq!((report.applied, report.rejected), (71, 0));
    assert!(report.commits >= 2, "{} commits", report.commits);
    assert_eq!(store.items.lock().expect("lock").len(), 70);
}

/// A sales trigger fires when the batch that crosses its step also registers the product
/// (found by an outside review: the trigger was only looked at when some product had one
/// before the batch), and does not fire on sales made before the trigger was set.
#[tokio::test]
async fn a_sales_trigger_counts_from_the_batch_that_registers_its_product() {
    let key = InstanceKey::new(
        crate::ids::TenantId::from_claim("tenant").expect("tenant"),
        ProjectId::parse("proj").expect("valid"),
        InstanceId::parse("inst").expect("valid"),
    );
    let entries = |first: u64, payloads: Vec<Value>| -> Vec<LogRecord> {
        (first..)
            .zip(payloads)
            .map(|(n, p)| record(n, format!("t{n}"), &p))
            .collect()
    };
    let product = |id: &str, trigger: bool| {
        let mut data = json!({"productId": id, "capacity": 10});
        if trigger {
            data["recalculation"] = json!({"soldPercentStep": 10});
        }
        json!({"type": "productRegistration", "data": data})
    };
    let item = |id: &str, product: &str| {
        json!({"type": "itemRegistration", "data": {"itemId": id, "productId": product,
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 90, "default": 40}}})
    };
    let sale = |id: &str, quantity: u64| json!({"type": "itemSale", "data": {"itemId": id, "quantity": quantity, "price": 40}});
    async fn run(log: Vec<LogRecord>, store: &LimitedStore, key: &InstanceKey) -> ProcessReport {
        Processor::new()
            .process(&Log(log), store, key, Timestamp::now())
            .await
            .expect("run")
    }
    // The product, its item and a sale of half its capacity in one batch.
    let store = LimitedStore::default();
    let log = entries(1, vec![product("P", true), item("A", "P"), sale("A", 5)]);
    assert!(run(log, &store, &key).await.sales_threshold_crossed);

    // A product sold without a trigger gets one: what it sold before does not fire it;
    // the next step does.
    let store = LimitedStore::default();
    let mut log = entries(1, vec![product("P", false), item("A", "P"), sale("A", 5)]);
    assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
    log.extend(entries(4, vec![product("P", true)]));
    assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
    log.extend(entries(5, vec![sale("A", 1)]));
    assert!(run(log, &store, &key).await.sales_threshold_crossed);

    // The trigger turned on and the crossing sale in one batch (a second outside review):
    // the sale counts from what the product had sold when the trigger came, by a
    // registration or by a properties patch.
    let patch_on = json!({"type": "productProperties", "data": {"productId": "P", "patch": [
        {"op": "add", "path": "/recalculation", "value": {"soldPercentStep": 10}}]}});
    for trigger in [product("P", true), patch_on] {
        let store = LimitedStore::default();
        let mut log = entries(1, vec![product("P", false), item("A", "P"), sale("A", 5)]);
        assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
        log.extend(entries(4, vec![trigger.clone(), sale("A", 3)]));
        assert!(
            run(log.clone(), &store, &key).await.sales_threshold_crossed,
            "{trigger}"
        );
        // Turned on alone, it does not fire.
        let store = LimitedStore::default();
        let mut log = entries(1, vec![product("P", false), item("A", "P"), sale("A", 5)]);
        assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
        log.extend(entries(4, vec![trigger.clone()]));
        assert!(
            !run(log.clone(), &store, &key).await.sales_threshold_crossed,
            "{trigger}"
        );
    }
    // Registered without a trigger, sold, the trigger turned on, all in one batch: no sale
    // came after it, so nothing fires (a review of the change above).
    let patch_on = json!({"type": "productProperties", "data": {"productId": "P", "patch": [
        {"op": "add", "path": "/recalculation", "value": {"soldPercentStep": 10}}]}});
    let patch_off = json!({"type": "productProperties", "data": {"productId": "P", "patch": [
        {"op": "remove", "path": "/recalculation"}]}});
    let store = LimitedStore::default();
    let log = entries(
        1,
        vec![
            product("P", false),
            item("A", "P"),
            sale("A", 5),
            patch_on.clone(),
        ],
    );
    assert!(!run(log, &store, &key).await.sales_threshold_crossed);
    // Turned off, sold while off, turned on again, in one batch: the sales while it was
    // off do not fire it; the next sale does.
    let store = LimitedStore::default();
    let mut log = entries(1, vec![product("P", true), item("A", "P"), sale("A", 5)]);
    assert!(run(log.clone(), &store, &key).await.sales_threshold_crossed);
    log.extend(entries(4, vec![patch_off, sale("A", 3), patch_on.clone()]));
    assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
    log.extend(entries(7, vec![sale("A", 1)]));
    assert!(run(log, &store, &key).await.sales_threshold_crossed);
    // An item sold after the trigger came on and then removed, in one batch: its units
    // sold stay the product's (since 2026-11-30), so the sale's crossing fires as any
    // other (a removal used to take them away, and the batch did not fire).
    let store = LimitedStore::default();
    let mut log = entries(
        1,
        vec![
            product("P", false),
            item("A", "P"),
            item("B", "P"),
            sale("A", 5),
        ],
    );
    assert!(!run(log.clone(), &store, &key).await.sales_threshold_crossed);
    let removal = json!({"type": "itemRemoval", "data": {"itemId": "B"}});
    log.extend(entries(5, vec![patch_on.clone(), sale("B", 2), removal]));
    assert!(run(log, &store, &key).await.sales_threshold_crossed);

    // The calculation a crossing asks for is marked due in the header the sales are
    // committed with, and asked for by every later run until one knows it was asked for:
    // a request lost between the commit and the queue is not lost for good.
    let store = LimitedStore::default();
    let processor = Processor::new();
    let process = |log: Vec<LogRecord>| {
        let (store, key, processor) = (&store, &key, &processor);
        async move {
            processor
                .process(&Log(log), store, key, Timestamp::now())
                .await
                .expect("run")
        }
    };
    let mut log = entries(1, vec![product("P", true), item("A", "P"), sale("A", 5)]);
    let report = process(log.clone()).await;
    assert_eq!(report.sales_calculation, Some(3));
    assert_eq!(store.header.lock().unwrap().sales_calculation_due, Some(3));
    // Its request failed: the next run, with nothing new, asks again; so does another
    // processor (a cold function), which reads the mark from the store.
    let again = process(log.clone()).await;
    assert_eq!(
        (again.sales_threshold_crossed, again.sales_calculation),
        (false, Some(3))
    );
    let cold = Processor::new()
        .process(&Log(log.clone()), &store, &key, Timestamp::now())
        .await
        .expect("run");
    assert_eq!(cold.sales_calculation, Some(3));
    // Asked for: not again, and the next commit stores the mark cleared.
    processor.sales_calculation_asked(&key, 3);
    assert_eq!(process(log.clone()).await.sales_calculation, None);
    log.extend(entries(4, vec![sale("A", 0)])); // no step crossed, a commit
    let next = process(log.clone()).await;
    assert_eq!(next.sales_calculation, None);
    assert_eq!(store.header.lock().unwrap().sales_calculation_due, None);
    // A later crossing is due at its own sequence.
    log.extend(entries(5, vec![sale("A", 1)]));
    assert_eq!(process(log).await.sales_calculation, Some(5));
}
