//! The apply step and submission, per entry.
//!
//! `cargo bench -p pricing-core --bench apply -- --warm-up-time 1 --measurement-time 3`
//!
//! - `apply/parse_and_apply`: parse_entry + apply on a realistic log (registrations first,
//!   then mostly itemSale, some itemReservation, itemQuantity and itemProperties patches).
//! - `apply/decode_parse_apply`: the same through `process::apply_record`, i.e. with the
//!   JWS payload decoded as the entry processor does.
//! - `apply/apply_only`: the apply step alone on pre-parsed entries (budget: >= 200,000
//!   entries/s).
//! - `submit/prepare_500`: `submit::prepare` on a 500-entry request, ES256 signing included.

use std::hint::black_box;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use pricing_core::entry::{Entry, ParseOptions, parse_entry};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::LogRecord;
use pricing_core::ports::MAX_COMMIT_RECORDS;
use pricing_core::process::apply_record;
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::submit::prepare;
use pricing_core::time::Timestamp;
use pricing_core::validate::Errors;
use serde_json::{Value, json};

const PRODUCTS: u64 = 20;
const ITEMS_PER_PRODUCT: u64 = 20;
const TAIL: usize = 10_000;

/// A small deterministic generator (no dependency needed for a fixed workload).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn now() -> Timestamp {
    Timestamp::parse("2026-05-19T12:00:00Z").expect("valid")
}

fn item_id(rng: &mut Lcg) -> String {
    format!("p{}-i{}", rng.below(PRODUCTS), rng.below(ITEMS_PER_PRODUCT))
}

fn sale(n: usize, rng: &mut Lcg) -> Value {
    let quantity = if rng.below(50) == 0 {
        -1
    } else {
        1 + rng.below(3) as i64
    };
    let price = 10.0 + rng.below(9_000) as f64 / 100.0;
    json!({
        "type": "itemSale",
        "transactionId": format!("tx-{n}"),
        "timestamp": "2026-05-19T11:59:00Z",
        "data": {
            "itemId": item_id(rng),
            "quantity": quantity,
            "price": price,
            "basePrice": 50,
            "pool": rng.below(10) == 0,
            "currency": "EUR",
            "tax": {"vatPercent": 19, "included": true}
        }
    })
}

/// Registrations first, then mostly sales.
fn workload() -> Vec<Value> {
    let mut rng = Lcg(42);
    let mut out = Vec::with_capacity(TAIL + (PRODUCTS * (ITEMS_PER_PRODUCT + 1)) as usize);
    for p in 0..PRODUCTS {
        out.push(json!({
            "type": "productRegistration",
            "transactionId": format!("reg-p{p}"),
            "data": {
                "productId": format!("p{p}"),
                "capacity": 1_000,
                "pricingModel": {"type": "pace", "sensitivity": 0.5},
                "expectedSales": 0.9,
                "recalculation": {"soldPercentStep": 5},
                "metadata": {"zone": format!("zone-{}", p % 4)}
            }
        }));
        for i in 0..ITEMS_PER_PRODUCT {
            out.push(json!({
                "type": "itemRegistration",
                "transactionId": format!("reg-p{p}-i{i}"),
                "data": {
                    "itemId": format!("p{p}-i{i}"),
                    "productId": format!("p{p}"),
                    "salesPeriod": {"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
                    "priceSettings": {"min": 10, "max": 100, "default": 50, "multiplier": 1.1},
                    "metadata": {"row": i, "section": "A"}
                }
            }));
        }
    }
    for n in 0..TAIL {
        let r = rng.below(100);
        let entry = if r < 80 {
            sale(n, &mut rng)
        } else if r < 88 {
            if rng.below(4) == 0 {
                json!({"type": "itemReservation", "data": {
                    "productId": format!("p{}", rng.below(PRODUCTS)), "reserved": rng.below(20)
                }})
            } else {
                json!({"type": "itemReservation", "data": {
                    "itemId": item_id(&mut rng), "reserved": rng.below(5)
                }})
            }
        } else if r < 95 {
            json!({"type": "itemQuantity", "data": {"itemId": item_id(&mut rng), "total": 5_000}})
        } else {
            json!({"type": "itemProperties", "data": {
                "itemId": item_id(&mut rng),
                "patch": [{"op": "replace", "path": "/priceSettings/default", "value": 10 + rng.below(90)}]
            }})
        };
        out.push(entry);
    }
    out
}

fn parsed(values: &[Value]) -> Vec<Entry> {
    values
        .iter()
        .map(|v| {
            let mut errors = Errors::default();
            parse_entry(v, "", ParseOptions::default(), &mut errors)
                .unwrap_or_else(|| panic!("invalid bench entry {v}: {:?}", errors.list))
        })
        .collect()
}

fn records(values: &[Value]) -> Vec<LogRecord> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| LogRecord {
            sequence: i as u64 + 1,
            transaction_id: None,
            received_at: now(),
            jwt: format!(
                "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsifQ.{}.c2ln",
                URL_SAFE_NO_PAD.encode(v.to_string())
            ),
        })
        .collect()
}

/// Clears the dirty set where the processor would commit.
fn maybe_commit(dirty: &mut Dirty) {
    if dirty.record_count() + 1 >= MAX_COMMIT_RECORDS {
        dirty.clear();
    }
}

fn bench_apply(c: &mut Criterion) {
    let values = workload();
    let entries = parsed(&values);
    let log = records(&values);
    // The workload must be mostly accepted to measure the real path.
    let mut state = InstanceState::default();
    let rejected = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            state
                .apply_logged(e, *i as u64 + 1, &mut Dirty::default())
                .is_err()
        })
        .count();
    assert!(rejected * 20 < entries.len(), "{rejected} rejected");

    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(values.len() as u64));
    group.sample_size(20);
    group.bench_function("parse_and_apply", |b| {
        b.iter_batched(
            InstanceState::default,
            |mut state| {
                let mut dirty = Dirty::default();
                for (i, v) in values.iter().enumerate() {
                    let mut errors = Errors::default();
                    if let Some(e) = parse_entry(v, "", ParseOptions::default(), &mut errors) {
                        let _ = black_box(state.apply_logged(&e, i as u64 + 1, &mut dirty));
                    }
                    maybe_commit(&mut dirty);
                }
                state
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("decode_parse_apply", |b| {
        b.iter_batched(
            InstanceState::default,
            |mut state| {
                let mut dirty = Dirty::default();
                for record in &log {
                    let _ = black_box(apply_record(&mut state, record, &mut dirty));
                    maybe_commit(&mut dirty);
                }
                state
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("apply_only", |b| {
        b.iter_batched(
            InstanceState::default,
            |mut state| {
                let mut dirty = Dirty::default();
                for (i, e) in entries.iter().enumerate() {
                    let _ = black_box(state.apply_logged(e, i as u64 + 1, &mut dirty));
                    maybe_commit(&mut dirty);
                }
                state
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn bench_submit(c: &mut Criterion) {
    let key = StoredKey::generate("bench".into(), now()).expect("a key");
    let signer = Signer::from_keys(&[key]).expect("a signer");
    let mut rng = Lcg(7);
    let entries: Vec<Value> = (0..500)
        .map(|n| {
            let mut s = sale(n, &mut rng);
            // Entries of a request usually take the request's id.
            if let (0, Some(o)) = (n % 2, s.as_object_mut()) {
                o.remove("transactionId");
            }
            s
        })
        .collect();
    let body = json!({"requestId": "bench-request", "entries": entries});
    assert!(prepare(&body, &signer, now()).is_ok());

    let mut group = c.benchmark_group("submit");
    group.throughput(Throughput::Elements(500));
    group.sample_size(10);
    group.bench_function("prepare_500", |b| {
        b.iter(|| prepare(black_box(&body), &signer, now()))
    });
    group.finish();
}

criterion_group!(benches, bench_apply, bench_submit);
criterion_main!(benches);
