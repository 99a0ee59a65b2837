//! Issue 12, item 5: the write units an append costs, per partition key, and the ceiling of
//! one instance's log that follows from them (docs/aws.md, "An instance's write ceiling").
//!
//! The emulator does not report consumed capacity for transactions (moto answers
//! `ConsumedCapacity: []` to TransactWriteItems with `ReturnConsumedCapacity`, and a
//! constant 1.0 to single-item writes), so this test computes the units from the requests
//! the adapter sends, by DynamoDB's rules: an item's size is the sum of its attribute
//! names' and values' sizes (strings and binaries by their bytes, numbers about one byte
//! per two significant digits plus one); a write costs one unit per started KB of the item,
//! a transactional write two. An update or a delete is counted at 1 KB (the items they
//! touch here, `LOG` and leftovers' keys, are below it; a delete of a leftover segment is
//! billed by the deleted item's size, which only happens after a failed append).
//!
//! `cargo test -p pricing-aws --test write_units -- --nocapture` prints the table recorded
//! in docs/aws.md.

mod common;
#[path = "common/item_size.rs"]
mod item_size;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use common::Stack;
use item_size::{item_size, units};
use pricing_aws::DynamoStore;
use pricing_contract::fixtures::{Run, transaction_id};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::{AppendOutcome, NewEntry};
use pricing_core::ports::EntryLog;
use pricing_core::time::Timestamp;
use serde_json::{Value, json};

/// Write units per partition key, summed over the requests seen.
#[derive(Debug, Clone, Default)]
struct Meter {
    units: Arc<Mutex<HashMap<String, f64>>>,
    calls: Arc<Mutex<usize>>,
}

impl Meter {
    fn take_calls(&self) -> usize {
        std::mem::take(&mut *self.calls.lock().expect("meter"))
    }

    fn take(&self) -> HashMap<String, f64> {
        std::mem::take(&mut *self.units.lock().expect("meter"))
    }

    fn add(&self, pk: &str, units: f64) {
        *self
            .units
            .lock()
            .expect("meter")
            .entry(pk.to_owned())
            .or_default() += units;
    }
}

fn pk_of(item: &Value) -> String {
    item["pk"]["S"].as_str().unwrap_or("?").to_owned()
}

impl Intercept for Meter {
    fn name(&self) -> &'static str {
        "Meter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or("");
        let Some(body) = request.body().bytes() else {
            return Ok(());
        };
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let op = target.rsplit('.').next().unwrap_or("");
        *self.calls.lock().expect("meter") += 1;
        match op {
            "TransactWriteItems" => {
                for action in body["TransactItems"].as_array().into_iter().flatten() {
                    if let Some(put) = action.get("Put") {
                        self.add(&pk_of(&put["Item"]), 2.0 * units(item_size(&put["Item"])));
                    } else if let Some((_, a)) = action.as_object().and_then(|o| o.iter().next()) {
                        self.add(&pk_of(&a["Key"]), 2.0);
                    }
                }
            }
            "PutItem" => self.add(&pk_of(&body["Item"]), units(item_size(&body["Item"]))),
            "UpdateItem" | "DeleteItem" => self.add(&pk_of(&body["Key"]), 1.0),
            "BatchWriteItem" => {
                for requests in body["RequestItems"]
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.values())
                {
                    for r in requests.as_array().into_iter().flatten() {
                        if let Some(item) = r.pointer("/PutRequest/Item") {
                            self.add(&pk_of(item), units(item_size(item)));
                        } else if let Some(key) = r.pointer("/DeleteRequest/Key") {
                            self.add(&pk_of(key), 1.0);
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn metered_store(stack: &Stack, meter: Meter) -> DynamoStore {
    let config = aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
        .interceptor(meter)
        .build();
    DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        &stack.config.table_name,
    )
}

/// A realistic `itemSale` as the entries API stores it: signed by the service key.
fn sale(signer: &Signer, n: usize) -> NewEntry {
    let tid = format!("order-{:08}-{}", n / 3, n % 3);
    let entry = json!({
        "type": "itemSale",
        "transactionId": tid,
        "timestamp": "2026-11-24T18:00:00.000Z",
        "data": {"itemId": format!("seat-{}-{}", (b'A' + (n % 20) as u8) as char, n % 40), "quantity": 1, "price": 49.5 + (n % 7) as f64}
    });
    NewEntry {
        transaction_id: Some(transaction_id(&tid)),
        received_at: Timestamp::now(),
        jwt: signer.sign_jws(entry.to_string().as_bytes()),
    }
}

struct Figures {
    requests: usize,
    per_request: usize,
    hot: f64,
    other_max: f64,
    other_total: f64,
    other_keys: usize,
    /// DynamoDB calls made by the appends (one after the other: an append's latency is
    /// about this many round trips).
    calls: usize,
}

impl Figures {
    fn entries(&self) -> f64 {
        (self.requests * self.per_request) as f64
    }
}

async fn measure(
    store: &DynamoStore,
    meter: &Meter,
    signer: &Signer,
    run: &Run,
    requests: usize,
    per_request: usize,
) -> Figures {
    let key = run.key("p", &format!("hot-{per_request}"));
    let pk_prefix = format!("I#{}", key.storage_key());
    meter.take();
    meter.take_calls();
    let mut n = 0;
    for _ in 0..requests {
        let entries: Vec<NewEntry> = (0..per_request)
            .map(|_| {
                n += 1;
                sale(signer, n)
            })
            .collect();
        let out = store.append(&key, entries).await.expect("append");
        assert!(
            out.iter()
                .all(|o| matches!(o, AppendOutcome::Accepted { .. })),
            "every entry is new"
        );
    }
    let calls = meter.take_calls();
    assert_eq!(
        store.read(&key, 0, 100_000).await.expect("read").len(),
        requests * per_request,
        "the log holds every entry"
    );
    let spent = meter.take();
    let hot = spent.get(&pk_prefix).copied().unwrap_or(0.0);
    let others: Vec<f64> = spent
        .iter()
        .filter(|(pk, _)| **pk != pk_prefix && pk.starts_with(&pk_prefix))
        .map(|(_, u)| *u)
        .collect();
    Figures {
        requests,
        per_request,
        hot,
        other_max: others.iter().copied().fold(0.0, f64::max),
        other_total: others.iter().sum(),
        other_keys: others.len(),
        calls,
    }
}

/// Hot partition: the write units per entry in the instance's own partition key, and the
/// entries/s its 1,000 units/s allow; likewise for the busiest other key of the instance
/// (the log's and markers' shards), and the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_units_per_entry_and_the_ceiling_they_give() {
    let stack = Stack::new("write-units").await;
    let meter = Meter::default();
    let store = metered_store(&stack, meter.clone());
    let run = Run::new("units");
    let key = StoredKey::generate("k-units".into(), Timestamp::now()).expect("a key");
    let signer = Signer::from_keys(&[key]).expect("a signer");

    let sample = sale(&signer, 1);
    println!(
        "an itemSale as stored: JWS {} bytes, transaction id {} bytes",
        sample.jwt.len(),
        sample
            .transaction_id
            .as_ref()
            .map_or(0, |t| t.as_str().len())
    );
    println!(
        "| entries per request | requests | WCU/entry, instance key | entries/s at 1,000 WCU/s | WCU/entry, busiest other key (of n) | WCU/entry, all keys | calls per request |"
    );
    let mut all = Vec::new();
    for (requests, per_request) in [(100, 1), (10, 10), (10, 100), (2, 1000)] {
        let f = measure(&store, &meter, &signer, &run, requests, per_request).await;
        println!(
            "| {} | {} | {:.3} | {:.0} | {:.3} ({}) | {:.3} | {:.1} |",
            f.per_request,
            f.requests,
            f.hot / f.entries(),
            1000.0 * f.entries() / f.hot,
            f.other_max / f.entries(),
            f.other_keys,
            (f.hot + f.other_total) / f.entries(),
            f.calls as f64 / f.requests as f64,
        );
        all.push(f);
    }
    // Issue 12, item 5: from 10 entries per request on, the instance's own key allows at
    // least 5,000 entries/s (before: ~4 units per entry whatever the batch, ~250/s).
    for f in all.iter().filter(|f| f.per_request >= 10) {
        assert!(
            f.hot / f.entries() <= 0.2 + 1e-9,
            "{} entries per request cost {:.3} units per entry in the instance key",
            f.per_request,
            f.hot / f.entries()
        );
    }
}
