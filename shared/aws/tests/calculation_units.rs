//! Issue 12, item 3: the bytes and DynamoDB write units one stored calculation of a
//! 10,000-item instance costs (`PriceStore::save_calculation`): a first calculation (every
//! price new), then recalculations an hour apart (most prices as they were).
//!
//! The emulator does not report consumed capacity for transactions, so the units are
//! computed from the requests the adapter sends, by DynamoDB's rules (as in
//! `tests/write_units.rs`): an item's size is the sum of its attribute names' and values'
//! sizes; a write costs one unit per started KB, a transactional write two; an update
//! costs by the item's size (here: a marker's `done` flag, under 1 KB); a delete by the
//! deleted item's size (this meter remembers what it saw written).
//!
//! `cargo test -p pricing-aws --test calculation_units -- --ignored --nocapture`

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
use pricing_contract::fixtures::Run;
use pricing_core::model::PriceCalculation;
use pricing_core::ports::PriceStore;
use pricing_core::pricing::{Previous, ProjectHistory, Trigger, calculate_with};
use pricing_core::recalc::{PriceHint, prices_updated_events};
use pricing_core::state::{InstanceState, ItemState, ProductState};
use pricing_core::time::Timestamp;
use serde_json::{Value, json};

#[derive(Debug, Clone, Default)]
struct Totals {
    units: f64,
    bytes: usize,
    requests: usize,
    items_written: usize,
}

/// Units and bytes of every write, and the size of every item written (for deletes).
#[derive(Debug, Clone, Default)]
struct Meter {
    totals: Arc<Mutex<Totals>>,
    sizes: Arc<Mutex<HashMap<(String, String), usize>>>,
}

fn key_of(item: &Value) -> (String, String) {
    (
        item["pk"]["S"].as_str().unwrap_or("?").to_owned(),
        item["sk"]["S"].as_str().unwrap_or("?").to_owned(),
    )
}

impl Meter {
    fn take(&self) -> Totals {
        std::mem::take(&mut *self.totals.lock().expect("meter"))
    }

    fn put(&self, item: &Value, factor: f64) {
        let size = item_size(item);
        self.sizes.lock().expect("sizes").insert(key_of(item), size);
        let mut t = self.totals.lock().expect("meter");
        t.units += factor * units(size);
        t.bytes += size;
        t.items_written += 1;
    }

    fn delete(&self, key: &Value) {
        let size = self
            .sizes
            .lock()
            .expect("sizes")
            .remove(&key_of(key))
            .unwrap_or(0);
        self.totals.lock().expect("meter").units += units(size);
    }

    fn update(&self, key: &Value) {
        let size = self
            .sizes
            .lock()
            .expect("sizes")
            .get(&key_of(key))
            .copied()
            .unwrap_or(0);
        self.totals.lock().expect("meter").units += units(size);
    }
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
        let counted = match op {
            "TransactWriteItems" => {
                for action in body["TransactItems"].as_array().into_iter().flatten() {
                    if let Some(put) = action.get("Put") {
                        self.put(&put["Item"], 2.0);
                    } else if let Some((_, a)) = action.as_object().and_then(|o| o.iter().next()) {
                        self.totals.lock().expect("meter").units += 2.0;
                        let _ = a;
                    }
                }
                true
            }
            "PutItem" => {
                self.put(&body["Item"], 1.0);
                true
            }
            "UpdateItem" => {
                self.update(&body["Key"]);
                true
            }
            "DeleteItem" => {
                self.delete(&body["Key"]);
                true
            }
            "BatchWriteItem" => {
                for requests in body["RequestItems"]
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.values())
                {
                    for r in requests.as_array().into_iter().flatten() {
                        if let Some(item) = r.pointer("/PutRequest/Item") {
                            self.put(item, 1.0);
                        } else if let Some(key) = r.pointer("/DeleteRequest/Key") {
                            self.delete(key);
                        }
                    }
                }
                true
            }
            _ => false,
        };
        if counted {
            self.totals.lock().expect("meter").requests += 1;
        }
        Ok(())
    }
}

/// 100 products of 100 items, every other product priced by `revenue` (the default), the
/// others by `pace`; sales periods around `now`, some units sold on every item.
fn instance(now: Timestamp) -> InstanceState {
    let day = 86_400_000;
    let start = Timestamp::from_millis(now.millis() - 30 * day).expect("time");
    let end = Timestamp::from_millis(now.millis() + 30 * day).expect("time");
    let mut state = InstanceState::default();
    for p in 0..100u64 {
        let model = if p % 2 == 0 {
            json!({"type": "revenue"})
        } else {
            json!({"type": "pace", "sensitivity": 0.7})
        };
        let product: ProductState = serde_json::from_value(json!({
            "productId": format!("prod-{p:02}"),
            "properties": {"capacity": 1_000, "pricingModel": model, "expectedSales": 0.9,
                           "rounding": {"step": 0.5}},
            "metadata": {},
            "reserved": 0,
            "seq": 1,
        }))
        .expect("product");
        state.products.insert(product.product_id.clone(), product);
        for i in 0..100u64 {
            let n = p * 100 + i;
            let item: ItemState = serde_json::from_value(json!({
                "itemId": format!("item-{n:05}"),
                "productId": format!("prod-{p:02}"),
                "properties": {
                    "salesPeriod": {"start": start, "end": end},
                    "dynamicPricing": true,
                    "priceSettings": {"min": 10, "max": 200, "default": 40 + n % 50, "multiplier": 1},
                },
                "metadata": {},
                "sold": n % 7,
                "reserved": 0,
                "revenueMicros": (n % 7) * 40_000_000,
                "removed": false,
                "seq": 1,
            }))
            .expect("item");
            state.items.insert(item.item_id.clone(), item);
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn write_units_per_calculation_of_10000_items() {
    let stack = Stack::new("calcunits").await;
    let meter = Meter::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
        .interceptor(meter.clone())
        .build();
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(config),
        &stack.config.table_name,
    );
    let key = Run::new("units").key("p", "big");
    let start = Timestamp::now();
    let state = instance(start);
    let mut hint = PriceHint::default();
    println!(
        "| calculation | prices changed | requests | items written | bytes written | write units |"
    );
    println!("|---|---|---|---|---|---|");
    for round in 0..4u64 {
        let now = Timestamp::from_millis(start.millis() + round as i64 * 3_600_000).expect("time");
        let result = calculate_with(
            &state,
            true,
            Trigger::Schedule,
            now,
            &Previous {
                at: hint.at,
                prices: &hint.prices,
                exposures: &hint.exposures,
            },
            &[],
            &ProjectHistory::default(),
        );
        let calculation = PriceCalculation {
            calculation_id: format!("calc-{round}"),
            trigger: Trigger::Schedule,
            metadata: None,
            calculated_at: now,
            sequence: round + 1,
            prices: result.prices,
        };
        let changed = calculation.prices.iter().filter(|p| p.changed).count();
        let events = prices_updated_events(&key, &calculation);
        meter.take();
        assert!(
            store
                .save_calculation(&key, &calculation, &events)
                .await
                .expect("save")
        );
        let t = meter.take();
        println!(
            "| {} (+{} h) | {changed} of {} | {} | {} | {} | {} |",
            round + 1,
            round,
            calculation.prices.len(),
            t.requests,
            t.items_written,
            t.bytes,
            t.units
        );
        let latest = store
            .latest_prices(&key)
            .await
            .expect("latest")
            .expect("some");
        assert_eq!(latest, calculation.without_explanations());
        hint = PriceHint::of(&calculation);
    }
}
