//! The pricing engine on 10,000-item instances: mixed rule-based models, and the revenue
//! model on its warm path.
//!
//! `cargo bench -p pricing-core --bench pricing -- --warm-up-time 1 --measurement-time 3`
//! (`-- revenue` for the revenue model's benches only)
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
//!
//! The revenue instance: 100 products of 100 items priced by `revenue` (the default
//! model), half way through a 122-day sales period. Each item spent that half at 8 prices
//! (0.9 to 1.25 times its default: the exposure carried from the previous calculation, an
//! hour earlier) and sold at them what a market with a known price response would buy:
//! about 300 units in about 100 `itemSale`s each (sales stats on the item, the product's
//! sales per share of the period on the product). Every other product has more believed
//! demand than units left (the bid price is solved); the others have capacity to spare.
//! The project has 3 past instances (the booking curves are learned).
//!
//! - `revenue/calculate_warm_10k`: `calculate_with` on the warm path (state in memory,
//!   previous calculation given, with the estimates it carries, history learned): the
//!   estimate update (a MAP fit per item, from the previous estimate) and the re-solve of
//!   every product. Budget: < 50 ms per 10,000 items, >=
//!   1,000,000 item prices per second per core.
//! - `revenue/calculate_warm_prior_10k`: the same in a new project (prior curve), its
//!   previous calculation made in the new project too.
//! - `revenue/calculate_and_serialize_10k`: the warm calculation plus its JSON
//!   (explanations and exposures), as a recalculator stores it.
//! - `revenue/learn_history_10x100`: learning the booking curves from 10 past instances
//!   of 100 products (what every recalculation does first); throughput in products.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pricing_core::document::CompactObject;
use pricing_core::entry::{
    ItemProps, PriceSettings, PricingModel, ProductProps, Rounding, Tier, TimeStep,
};
use pricing_core::ids::{ItemId, MatchId, ProductId};
use pricing_core::money::Money;
use pricing_core::pricing::demand::Exposure;
use pricing_core::pricing::revenue::{record_product_sale, record_sale};
use pricing_core::pricing::{
    Calculation, CurveSource, ModelExplanation, Previous, PriceMatch, ProjectHistory, Trigger,
    calculate, calculate_with,
};
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
                        extra: CompactObject::new(),
                    },
                    metadata: CompactObject::new(),
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

/// A small deterministic generator (the bench needs no randomness crate).
struct Lcg(u64);

impl Lcg {
    /// Uniform in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

const SALES_START_MS: i64 = 1_772_323_200_000; // 2026-03-01T00:00:00Z
const SALES_END_MS: i64 = 1_782_864_000_000; // 2026-07-01T00:00:00Z
const HOUR_MS: i64 = 3_600_000;

fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("valid time")
}

/// The revenue model's warm inputs: the state, the previous calculation's prices and
/// exposures, and the products' records in the project's past instances.
struct Warm {
    state: InstanceState,
    prices: BTreeMap<ItemId, Money>,
    exposures: BTreeMap<ItemId, Exposure>,
    past: Vec<ProductState>,
    now: Timestamp,
}

fn revenue_instance() -> Warm {
    let mut rng = Lcg(7);
    let now_ms = (SALES_START_MS + SALES_END_MS) / 2;
    let tau = 0.5;
    let period = Period::new(at_ms(SALES_START_MS), at_ms(SALES_END_MS)).expect("valid period");
    let mut state = InstanceState::default();
    let mut prices = BTreeMap::new();
    let mut exposures = BTreeMap::new();
    for p in 0..PRODUCTS {
        let product_id = ProductId::parse(format!("product-{p:03}")).expect("valid id");
        // About 27,000 units sold per product: every other one has about 8,000 left (the
        // believed demand exceeds them, the bid price is solved), the others over 100,000.
        let capacity = if p % 2 == 0 { 35_000 } else { 150_000 };
        let mut product = ProductState {
            product_id: product_id.clone(),
            properties: ProductProps {
                capacity: Some(capacity),
                pricing_model: PricingModel::Revenue {
                    max_step_change: None,
                },
                expected_sales: 0.9,
                recalculation: None,
                rounding: Rounding {
                    step: Money::from_micros(10_000),
                },
                extra: Map::new(),
            },
            metadata: Map::new(),
            reserved: 0,
            demand: Default::default(),
            seq: 1,
        };
        for i in 0..ITEMS_PER_PRODUCT {
            let n = p * ITEMS_PER_PRODUCT + i;
            let item_id = ItemId::parse(format!("item-{n:05}")).expect("valid id");
            let default = 20_000_000 + (n as i64 % 97) * 1_230_000;
            let mut item = ItemState {
                item_id: item_id.clone(),
                product_id: product_id.clone(),
                properties: ItemProps {
                    sales_period: period,
                    dynamic_pricing_period: None,
                    dynamic_pricing: true,
                    price_settings: PriceSettings {
                        min: Money::from_micros(default / 2),
                        max: Money::from_micros(default * 2),
                        default: Money::from_micros(default),
                        multiplier: 1.0,
                    },
                    extra: CompactObject::new(),
                },
                metadata: CompactObject::new(),
                sold: 0,
                reserved: 0,
                total: None,
                legacy_quantity: None,
                revenue_micros: 0,
                last_sale_at: None,
                demand: Default::default(),
                removed: false,
                seq: 1,
            };
            // The half of the period gone in 8 equal spells at 0.9 to 1.25 times the default
            // price (the exposure the previous calculations carried), and the units a
            // market of 600 buyers over the period at the default price (price response
            // 1.2 to 1.8 relative to it) bought in each spell: about 300 units in about
            // 100 sales of 1 to 5 units.
            let d = default as f64 / 1e6;
            let response = (1.2 + 0.6 * rng.next()) / d;
            let spell = (now_ms - SALES_START_MS) / 8;
            let mut exposure = Exposure::default();
            for k in 0..8 {
                let price =
                    Money::from_micros((d * (0.9 + 0.05 * k as f64) * 100.0) as i64 * 10_000);
                let mass = tau / 8.0;
                exposure.add(price.to_f64(), mass);
                let mut units_left =
                    (600.0 * mass * (-response * (price.to_f64() - d)).exp()).round() as u64;
                while units_left > 0 {
                    let units = (1 + (rng.next() * 5.0) as u64).min(units_left);
                    units_left -= units;
                    let when =
                        at_ms(SALES_START_MS + k * spell + (spell as f64 * rng.next()) as i64);
                    record_sale(&mut item, units, price, Some(when));
                    item.sold += units;
                    record_product_sale(&mut product, &item, units as i64, price, Some(when));
                }
            }
            exposures.insert(item_id.clone(), exposure);
            prices.insert(item_id.clone(), Money::from_micros(default / 100 * 105));
            state.items.insert(item_id, item);
        }
        state.products.insert(product_id, product);
    }
    // Three past instances, the periods before this one's: each product sold its whole
    // period, on a rising curve.
    let mut past = Vec::new();
    for back in 1..=3 {
        let shift = back * (SALES_END_MS - SALES_START_MS);
        let past_period = Period::new(at_ms(SALES_START_MS - shift), at_ms(SALES_END_MS - shift))
            .expect("valid period");
        for product in state.products.values() {
            let mut record = product.clone();
            record.demand = Default::default();
            let mut item = state
                .items
                .values()
                .find(|i| i.product_id == product.product_id)
                .expect("an item")
                .clone();
            item.properties.sales_period = past_period;
            let default = item.properties.price_settings.default;
            for _ in 0..400 {
                let when = SALES_START_MS - shift
                    + ((SALES_END_MS - SALES_START_MS) as f64 * rng.next().sqrt()) as i64;
                record_product_sale(&mut record, &item, 60, default, Some(at_ms(when)));
            }
            past.push(record);
        }
    }
    Warm {
        state,
        prices,
        exposures,
        past,
        now: at_ms(now_ms),
    }
}

/// The bench measures what its doc says: every item priced by `revenue` on a learned
/// curve, the bid price solved for the products short of units and 0 for the others.
fn check_revenue_instance(c: &Calculation) {
    let model = |n: usize| match c.prices[n].explanation.model.as_ref() {
        Some(ModelExplanation::Revenue(r)) => r.clone(),
        other => panic!("item {n} is not priced by revenue: {other:?}"),
    };
    assert_eq!(c.calculated().count(), PRODUCTS * ITEMS_PER_PRODUCT);
    for p in 0..PRODUCTS {
        let r = model(p * ITEMS_PER_PRODUCT);
        assert_eq!(r.curve, CurveSource::Learned);
        assert!(r.units_observed >= 200, "{r:?}");
        assert!(r.demand_observed > 0.3, "{r:?}");
        assert_eq!(r.bid_price > 0.0, p % 2 == 0, "product {p}: {r:?}");
    }
}

fn revenue(c: &mut Criterion) {
    let warm = revenue_instance();
    let history = ProjectHistory::from_products(&warm.past, warm.now);
    let new_project = ProjectHistory::default();
    // The previous calculation, an hour earlier (itself an hour after the exposures
    // built above), made with the same history as the measured one (a new project's
    // previous calculation was a new project's too): its prices, and its exposures with
    // the estimates it carries, from which the measured fits start.
    let before = |history: &ProjectHistory| {
        let c = calculate_with(
            &warm.state,
            true,
            Trigger::Schedule,
            at_ms(warm.now.millis() - HOUR_MS),
            &Previous {
                at: Some(at_ms(warm.now.millis() - 2 * HOUR_MS)),
                prices: &warm.prices,
                exposures: &warm.exposures,
            },
            &[],
            history,
        );
        let prices = pricing_core::pricing::prices_by_item(&c.prices);
        let exposures = pricing_core::pricing::exposures_by_item(&c.prices);
        (c.calculated_at, prices, exposures)
    };
    let learned = before(&history);
    let prior = before(&new_project);
    let calculate_warm = |history: &ProjectHistory| {
        let (at, prices, exposures) = if history.is_empty() { &prior } else { &learned };
        calculate_with(
            black_box(&warm.state),
            true,
            Trigger::Schedule,
            warm.now,
            black_box(&Previous {
                at: Some(*at),
                prices,
                exposures,
            }),
            &[],
            black_box(history),
        )
    };
    check_revenue_instance(&calculate_warm(&history));
    // A new project's items price on the prior curve (the instance's own shape).
    let fresh = calculate_warm(&new_project);
    assert_eq!(fresh.calculated().count(), PRODUCTS * ITEMS_PER_PRODUCT);
    assert!(fresh.prices.iter().all(|p| matches!(
        p.explanation.model.as_ref(),
        Some(ModelExplanation::Revenue(r)) if r.curve == CurveSource::Prior
    )));
    let mut group = c.benchmark_group("revenue");
    group.sample_size(30);
    group.throughput(Throughput::Elements(warm.state.items.len() as u64));
    group.bench_function("calculate_warm_10k", |b| {
        b.iter(|| calculate_warm(&history))
    });
    group.bench_function("calculate_warm_prior_10k", |b| {
        b.iter(|| calculate_warm(&new_project))
    });
    group.bench_function("calculate_and_serialize_10k", |b| {
        b.iter(|| serde_json::to_vec(&calculate_warm(&history)).expect("serializable"))
    });
    // 10 past instances of 100 products.
    let ten: Vec<ProductState> = warm
        .past
        .iter()
        .cycle()
        .take(10 * PRODUCTS)
        .cloned()
        .collect();
    group.throughput(Throughput::Elements(ten.len() as u64));
    group.bench_function("learn_history_10x100", |b| {
        b.iter(|| ProjectHistory::from_products(black_box(&ten), warm.now))
    });
    group.finish();
}

criterion_group!(benches, bench, revenue);
criterion_main!(benches);
