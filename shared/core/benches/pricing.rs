//! The pricing engine on a 10,000-item instance with mixed models.
//!
//! `cargo bench -p pricing-core --bench pricing -- --warm-up-time 1 --measurement-time 3`
//!
//! The instance: 100 products of 100 items, models in turn pace, timeBased, tiers, fixed
//! (every other product with maxStepChange), rounding steps 0.01 / 0.05 / 0.5 / 1, sales on
//! every item, a previous price for every item, 5 % of the items with dynamic pricing off,
//! and 200 price match rules (chains of two).
//!
//! - `pricing/calculate_schedule_10k`: a scheduled calculation (eligibility checked).
//! - `pricing/calculate_request_10k`: a request (every item calculated).
//! - `pricing/calculate_and_serialize_10k`: the scheduled calculation plus its JSON
//!   (explanations included), as a recalculator would store it.
//!
//! Throughput is in items: item prices per second (budget: >= 2,000,000 per core).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pricing_core::entry::{
    ItemProps, PriceSettings, PricingModel, ProductProps, Rounding, Tier, TimeStep,
};
use pricing_core::ids::{ItemId, MatchId, ProductId};
use pricing_core::money::Money;
use pricing_core::pricing::{PriceMatch, Trigger, calculate};
use pricing_core::state::{InstanceState, ItemState, ProductState};
use pricing_core::time::{Period, Timestamp};
use serde_json::{Map, json};

const PRODUCTS: usize = 100;
const ITEMS_PER_PRODUCT: usize = 100;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("valid timestamp")
}

fn model(p: usize) -> PricingModel {
    let max_step_change = p.is_multiple_of(2).then_some(0.15);
    match p % 4 {
        0 => PricingModel::Pace {
            sensitivity: 0.5,
            curve: 1.5,
            max_step_change,
        },
        1 => PricingModel::TimeBased {
            steps: vec![
                TimeStep {
                    days_before: 0.0,
                    multiplier: 1.6,
                },
                TimeStep {
                    days_before: 14.0,
                    multiplier: 1.2,
                },
                TimeStep {
                    days_before: 60.0,
                    multiplier: 0.9,
                },
            ],
            max_step_change,
        },
        2 => PricingModel::Tiers {
            tiers: vec![
                Tier {
                    up_to_sold_percent: Some(25.0),
                    multiplier: 0.85,
                },
                Tier {
                    up_to_sold_percent: Some(75.0),
                    multiplier: 1.0,
                },
                Tier {
                    up_to_sold_percent: None,
                    multiplier: 1.3,
                },
            ],
            max_step_change,
        },
        _ => PricingModel::Fixed { max_step_change },
    }
}

fn instance() -> (InstanceState, BTreeMap<ItemId, Money>, Vec<PriceMatch>) {
    let mut state = InstanceState::default();
    if let Some(meta) =
        json!({"dates": [{"date": {"start": "2026-07-01T19:00:00Z", "end": "2026-07-01T23:00:00Z"},
                                         "description": "Show", "tags": ["main"]}]})
        .as_object()
    {
        state.header.meta = meta.clone();
    }
    let steps = [10_000, 50_000, 500_000, 1_000_000];
    let mut previous = BTreeMap::new();
    for p in 0..PRODUCTS {
        let product_id = ProductId::parse(format!("product-{p:03}")).expect("valid id");
        state.products.insert(
            product_id.clone(),
            ProductState {
                product_id: product_id.clone(),
                properties: ProductProps {
                    capacity: Some(20 * ITEMS_PER_PRODUCT as u64),
                    pricing_model: model(p),
                    expected_sales: 0.9,
                    recalculation: None,
                    rounding: Rounding {
                        step: Money::from_micros(steps[p % steps.len()]),
                    },
                    extra: Map::new(),
                },
                metadata: Map::new(),
                reserved: 0,
                demand: Default::default(),
                seq: 1,
            },
        );
        for i in 0..ITEMS_PER_PRODUCT {
            let n = p * ITEMS_PER_PRODUCT + i;
            let item_id = ItemId::parse(format!("item-{n:05}")).expect("valid id");
            let default = 20_000_000 + (n as i64 % 97) * 1_230_000;
            state.items.insert(
                item_id.clone(),
                ItemState {
                    item_id: item_id.clone(),
                    product_id: product_id.clone(),
                    properties: ItemProps {
                        sales_period: Period::new(
                            ts("2026-03-01T00:00:00Z"),
                            ts("2026-07-01T19:00:00Z"),
                        )
                        .expect("valid period"),
                        dynamic_pricing_period: None,
                        dynamic_pricing: !n.is_multiple_of(20),
                        price_settings: PriceSettings {
                            min: Money::from_micros(default / 2 + 3_333),
                            max: Money::from_micros(default * 2 - 7_777),
                            default: Money::from_micros(default),
                            multiplier: 1.0 + (n % 5) as f64 * 0.05,
                        },
                        extra: Map::new(),
                    },
                    metadata: Map::new(),
                    sold: (n as u64 * 7) % 23,
                    reserved: 0,
                    total: None,
                    legacy_quantity: None,
                    revenue_micros: 0,
                    last_sale_at: None,
                    demand: Default::default(),
                    removed: false,
                    seq: 1,
                },
            );
            previous.insert(item_id, Money::from_micros(default + 500_000));
        }
    }
    // 200 rules: item k*50+1 follows k*50, and k*50+2 follows k*50+1.
    let mut matches = Vec::new();
    for k in 0..100 {
        for d in 1..=2 {
            let target = k * 50 + d;
            matches.push(PriceMatch {
                match_id: MatchId::parse(format!("m-{target}")).expect("valid id"),
                item_id: ItemId::parse(format!("item-{target:05}")).expect("valid id"),
                source_item_id: ItemId::parse(format!("item-{:05}", target - 1)).expect("valid id"),
                ratio: 1.1,
                offset: Money::from_micros(-250_000),
            });
        }
    }
    (state, previous, matches)
}

fn bench(c: &mut Criterion) {
    let (state, previous, matches) = instance();
    let now = ts("2026-05-19T12:00:00Z");
    let mut group = c.benchmark_group("pricing");
    group.throughput(Throughput::Elements(state.items.len() as u64));
    group.sample_size(30);
    group.bench_function("calculate_schedule_10k", |b| {
        b.iter(|| {
            calculate(
                black_box(&state),
                true,
                Trigger::Schedule,
                now,
                black_box(&previous),
                black_box(&matches),
            )
        })
    });
    group.bench_function("calculate_request_10k", |b| {
        b.iter(|| {
            calculate(
                black_box(&state),
                true,
                Trigger::Request,
                now,
                black_box(&previous),
                black_box(&matches),
            )
        })
    });
    group.bench_function("calculate_and_serialize_10k", |b| {
        b.iter(|| {
            let c = calculate(
                black_box(&state),
                true,
                Trigger::Schedule,
                now,
                black_box(&previous),
                black_box(&matches),
            );
            serde_json::to_vec(&c).expect("serializable")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
