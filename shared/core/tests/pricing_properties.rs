//! Property tests of the pricing engine on generated instances.
//!
//! 1. Bounds hold: every calculated price lies in the item's [min, max], also after price
//!    matches; kept prices are the previous price or the default.
//! 2. Calculated prices are multiples of the product's rounding step, or a bound.
//! 3. Price matches never loop: a random rule set is either refused by validation or not,
//!    and `calculate` always ends with every live item priced exactly once; for an accepted
//!    set, every rule whose items are live and whose target is calculated applies.
//! 4. Equal inputs give equal prices (also after a JSON round trip of the state).
//! 5. `round_within` alone: inside the bounds, and a step multiple or a bound.

use std::collections::BTreeMap;

use pricing_core::entry::{
    ItemProps, PriceSettings, PricingModel, ProductProps, Rounding, Tier, TimeStep,
};
use pricing_core::ids::{ItemId, MatchId, ProductId};
use pricing_core::money::Money;
use pricing_core::pricing::{
    PriceMatch, PriceStatus, SkipReason, Trigger, calculate, round_within, validate_matches,
};
use pricing_core::state::{InstanceState, ItemState, ProductState};
use pricing_core::time::{Period, Timestamp};
use proptest::prelude::*;
use serde_json::{Map, json};

const DAY_MS: i64 = 86_400_000;
/// 2026-01-01T00:00:00Z.
const BASE_MS: i64 = 1_767_225_600_000;
const STEPS: [i64; 8] = [
    10_000, 30_000, 50_000, 70_000, 250_000, 500_000, 1_000_000, 2_500_000,
];

fn ts_at(day: i64) -> Timestamp {
    Timestamp::from_millis(BASE_MS + day * DAY_MS / 4).expect("in range")
}

#[derive(Debug, Clone)]
struct GenProduct {
    model: PricingModel,
    step: i64,
    capacity: Option<u64>,
    expected_sales: f64,
}

#[derive(Debug, Clone)]
struct GenItem {
    product: usize,
    min: i64,
    width: i64,
    default_at: f64,
    multiplier: f64,
    sold: u64,
    toggle: bool,
    sales: (i64, i64),
    dpp: Option<(i64, i64)>,
    removed: bool,
    previous: Option<i64>,
}

#[derive(Debug, Clone)]
struct GenRule {
    target: usize,
    source: usize,
    ratio: f64,
    offset: i64,
}

#[derive(Debug, Clone)]
struct Case {
    products: Vec<GenProduct>,
    items: Vec<GenItem>,
    rules: Vec<GenRule>,
    main_date: Option<i64>,
    now: i64,
    active: bool,
    trigger: Trigger,
}

/// Decimals as clients send them (`lo / scale .. hi / scale` in steps of `1 / scale`): they
/// survive a JSON round trip exactly, which arbitrary doubles do not with serde_json's
/// default float parser.
fn dec(lo: u32, hi: u32, scale: u32) -> impl Strategy<Value = f64> {
    (lo..=hi).prop_map(move |n| f64::from(n) / f64::from(scale))
}

fn max_step_change() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![Just(None), dec(1, 50, 100).prop_map(Some)]
}

fn model() -> impl Strategy<Value = PricingModel> {
    prop_oneof![
        (dec(0, 200, 100), dec(10, 300, 100), max_step_change()).prop_map(|(s, c, m)| {
            PricingModel::Pace {
                sensitivity: s,
                curve: c,
                max_step_change: m,
            }
        }),
        (
            prop::collection::vec((dec(0, 900, 10), dec(0, 300, 100)), 1..5),
            max_step_change()
        )
            .prop_map(|(steps, m)| PricingModel::TimeBased {
                steps: steps
                    .into_iter()
                    .map(|(d, mult)| TimeStep {
                        days_before: d,
                        multiplier: mult,
                    })
                    .collect(),
                max_step_change: m,
            }),
        (
            prop::collection::vec((prop::option::of(dec(0, 1000, 10)), dec(0, 300, 100)), 1..5),
            max_step_change()
        )
            .prop_map(|(tiers, m)| PricingModel::Tiers {
                tiers: tiers
                    .into_iter()
                    .map(|(u, mult)| Tier {
                        up_to_sold_percent: u,
                        multiplier: mult,
                    })
                    .collect(),
                max_step_change: m,
            }),
        max_step_change().prop_map(|m| PricingModel::Fixed { max_step_change: m }),
    ]
}

fn product() -> impl Strategy<Value = GenProduct> {
    (
        model(),
        prop::sample::select(STEPS.to_vec()),
        prop::option::of(0u64..300),
        dec(0, 100, 100),
    )
        .prop_map(|(model, step, capacity, expected_sales)| GenProduct {
            model,
            step,
            capacity,
            expected_sales,
        })
}

fn item(products: usize) -> impl Strategy<Value = GenItem> {
    (
        (
            0..products,
            0i64..200_000_000,
            0i64..60_000_000,
            dec(0, 1000, 1000),
        ),
        (dec(0, 40_000, 10_000), 0u64..400, prop::bool::weighted(0.8)),
        (0i64..400, 1i64..400),
        prop::option::of((0i64..400, 1i64..200)),
        prop::bool::weighted(0.1),
        prop::option::of(0i64..300_000_000),
    )
        .prop_map(
            |(
                (product, min, width, default_at),
                (multiplier, sold, toggle),
                sales,
                dpp,
                removed,
                previous,
            )| {
                GenItem {
                    product,
                    min,
                    width,
                    default_at,
                    multiplier,
                    sold,
                    toggle,
                    sales,
                    dpp,
                    removed,
                    previous,
                }
            },
        )
}

fn rule(items: usize) -> impl Strategy<Value = GenRule> {
    // Indices up to items + 1 name items that do not exist.
    (
        0..items + 2,
        0..items + 2,
        dec(0, 300, 100),
        -50_000_000i64..50_000_000,
    )
        .prop_map(|(target, source, ratio, offset)| GenRule {
            target,
            source,
            ratio,
            offset,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..4, 1usize..12)
        .prop_flat_map(|(np, ni)| {
            (
                prop::collection::vec(product(), np),
                prop::collection::vec(item(np), ni),
                prop::collection::vec(rule(ni), 0..10),
                prop::option::of(0i64..800),
                0i64..800,
                any::<bool>(),
                prop::sample::select(vec![
                    Trigger::Schedule,
                    Trigger::Sales,
                    Trigger::Request,
                    Trigger::Manual,
                ]),
            )
        })
        .prop_map(
            |(products, items, rules, main_date, now, active, trigger)| Case {
                products,
                items,
                rules,
                main_date,
                now,
                active,
                trigger,
            },
        )
}

fn item_id(i: usize) -> ItemId {
    ItemId::parse(format!("i{i:02}")).expect("valid id")
}

fn product_id(p: usize) -> ProductId {
    ProductId::parse(format!("p{p}")).expect("valid id")
}

struct Built {
    state: InstanceState,
    previous: BTreeMap<ItemId, Money>,
    rules: Vec<PriceMatch>,
    now: Timestamp,
}

fn build(c: &Case) -> Built {
    let mut state = InstanceState::default();
    if let Some(d) = c.main_date {
        let start = ts_at(d).to_rfc3339();
        if let Some(m) =
            json!({"dates": [{"date": {"start": start, "end": start}, "tags": ["main"]}]})
                .as_object()
        {
            state.header.meta = m.clone();
        }
    }
    for (p, g) in c.products.iter().enumerate() {
        state.products.insert(
            product_id(p),
            ProductState {
                product_id: product_id(p),
                properties: ProductProps {
                    capacity: g.capacity,
                    pricing_model: g.model.clone(),
                    expected_sales: g.expected_sales,
                    recalculation: None,
                    rounding: Rounding {
                        step: Money::from_micros(g.step),
                    },
                    extra: Map::new(),
                },
                metadata: Map::new(),
                reserved: 0,
                demand: Default::default(),
                seq: 1,
            },
        );
    }
    let mut previous = BTreeMap::new();
    for (i, g) in c.items.iter().enumerate() {
        let min = g.min;
        let max = g.min + g.width;
        let default = min + (g.width as f64 * g.default_at) as i64;
        let period = |(start, len): (i64, i64)| {
            Period::new(ts_at(start), ts_at(start + len)).expect("start < end")
        };
        state.items.insert(
            item_id(i),
            ItemState {
                item_id: item_id(i),
                product_id: product_id(g.product),
                properties: ItemProps {
                    sales_period: period(g.sales),
                    dynamic_pricing_period: g.dpp.map(period),
                    dynamic_pricing: g.toggle,
                    price_settings: PriceSettings {
                        min: Money::from_micros(min),
                        max: Money::from_micros(max),
                        default: Money::from_micros(default.clamp(min, max)),
                        multiplier: g.multiplier,
                    },
                    extra: pricing_core::document::CompactObject::new(),
                },
                metadata: pricing_core::document::CompactObject::new(),
                sold: g.sold,
                reserved: 0,
                total: None,
                legacy_quantity: None,
                revenue_micros: 0,
                last_sale_at: None,
                demand: Default::default(),
                removed: g.removed,
                seq: 1,
            },
        );
        if let Some(p) = g.previous {
            previous.insert(item_id(i), Money::from_micros(p));
        }
    }
    let rules = c
        .rules
        .iter()
        .enumerate()
        .map(|(k, r)| PriceMatch {
            match_id: MatchId::parse(format!("m{k}")).expect("valid id"),
            item_id: item_id(r.target),
            source_item_id: item_id(r.source),
            ratio: r.ratio,
            offset: Money::from_micros(r.offset),
        })
        .collect();
    Built {
        state,
        previous,
        rules,
        now: ts_at(c.now),
    }
}

fn step_of(state: &InstanceState, item: &ItemState) -> i64 {
    state.products[&item.product_id]
        .properties
        .rounding
        .step
        .micros()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn bounds_hold_and_prices_are_step_multiples(c in case()) {
        let b = build(&c);
        let calc = calculate(&b.state, c.active, c.trigger, b.now, &b.previous, &b.rules);
        for p in &calc.prices {
            let item = &b.state.items[&p.item_id];
            let ps = &item.properties.price_settings;
            match p.status {
                PriceStatus::Calculated => {
                    prop_assert!(ps.min <= p.price && p.price <= ps.max,
                        "{} = {:?} outside [{:?}, {:?}]", p.item_id, p.price, ps.min, ps.max);
                    let step = step_of(&b.state, item);
                    prop_assert!(p.price.micros() % step == 0 || p.price == ps.min || p.price == ps.max,
                        "{} = {:?} is no multiple of {step} nor a bound", p.item_id, p.price);
                }
                PriceStatus::Kept => {
                    // An item whose dynamic pricing is off is at its default as set, not at
                    // its previous price (a manual trigger resends every previous price).
                    let previous = b.previous.get(&p.item_id).filter(|_| {
                        item.properties.dynamic_pricing || c.trigger == Trigger::Manual
                    });
                    match previous {
                        Some(&previous) if ps.min <= previous && previous <= ps.max => {
                            prop_assert_eq!(p.price, previous)
                        }
                        // Never priced, or dynamic pricing off: its default as its settings
                        // make it, on the grid; priced before bounds that exclude it now: the
                        // nearest bound, on the grid.
                        _ => {
                            prop_assert!(ps.min <= p.price && p.price <= ps.max,
                                "{} = {:?} outside [{:?}, {:?}]", p.item_id, p.price, ps.min, ps.max);
                            let step = step_of(&b.state, item);
                            prop_assert!(p.price.micros() % step == 0 || p.price == ps.min || p.price == ps.max,
                                "{} = {:?} is no multiple of {step} nor a bound", p.item_id, p.price);
                        }
                    }
                    prop_assert!(p.explanation.kept.is_some());
                }
            }
            prop_assert_eq!(p.changed, p.previous_price != Some(p.price));
        }
        // Requests calculate every live item with dynamic pricing on, active or not;
        // manual none; an inactive instance's schedule none (its sales runs price the
        // items inside their periods).
        match c.trigger {
            Trigger::Request => {
                for p in &calc.prices {
                    let on = b.state.items[&p.item_id].properties.dynamic_pricing;
                    prop_assert_eq!(p.status == PriceStatus::Kept, !on, "{}", p.item_id);
                }
            }
            Trigger::Manual => prop_assert_eq!(calc.calculated().count(), 0),
            Trigger::Schedule if !c.active => prop_assert_eq!(calc.calculated().count(), 0),
            _ => {}
        }
    }

    #[test]
    fn matches_never_loop_and_each_item_is_priced_once(c in case()) {
        let b = build(&c);
        let verdict = validate_matches(&b.rules, &b.state);
        let calc = calculate(&b.state, c.active, c.trigger, b.now, &b.previous, &b.rules);
        let live: Vec<&ItemId> = b.state.items.values().filter(|i| !i.removed).map(|i| &i.item_id).collect();
        let priced: Vec<&ItemId> = calc.prices.iter().map(|p| &p.item_id).collect();
        prop_assert_eq!(live, priced);
        // A rule applies at most once per target.
        let mut applied: BTreeMap<&ItemId, usize> = BTreeMap::new();
        for p in &calc.prices {
            if p.explanation.price_match.is_some() {
                *applied.entry(&p.item_id).or_default() += 1;
            }
        }
        prop_assert!(applied.values().all(|&n| n == 1));
        if verdict.is_ok() {
            prop_assert!(calc.skipped_matches.iter().all(|s| !matches!(
                s.reason,
                SkipReason::InCycle | SkipReason::DuplicateTarget | SkipReason::InvalidRatio
            )));
            for r in &b.rules {
                let live = |id: &ItemId| b.state.items.get(id).is_some_and(|i| !i.removed);
                let Some(target) = calc.get(&r.item_id) else { continue };
                if live(&r.item_id) && live(&r.source_item_id) && target.status == PriceStatus::Calculated {
                    let m = target.explanation.price_match.as_ref();
                    prop_assert_eq!(m.map(|m| &m.match_id), Some(&r.match_id));
                    // The source's final price is what the rule read.
                    let source = calc.get(&r.source_item_id).map(|s| s.price);
                    prop_assert_eq!(m.map(|m| m.source_price), source);
                }
            }
        } else {
            // A refused set has a cycle, a second rule for a target or a bad ratio.
            prop_assert!(!b.rules.is_empty());
        }
    }

    #[test]
    fn equal_inputs_give_equal_prices(c in case()) {
        let b = build(&c);
        let one = calculate(&b.state, c.active, c.trigger, b.now, &b.previous, &b.rules);
        let two = calculate(&b.state, c.active, c.trigger, b.now, &b.previous, &b.rules);
        prop_assert_eq!(&one, &two);
        let json = serde_json::to_string(&b.state).expect("serializable");
        let state: InstanceState = serde_json::from_str(&json).expect("deserializable");
        let three = calculate(&state, c.active, c.trigger, b.now, &b.previous, &b.rules);
        prop_assert_eq!(&one, &three);
        // The prices survive JSON exactly (explanation floats may differ in the last bit
        // with serde_json's default float parser).
        let back: pricing_core::pricing::Calculation =
            serde_json::from_str(&serde_json::to_string(&one).expect("serializable")).expect("deserializable");
        let key = |c: &pricing_core::pricing::Calculation| {
            c.prices
                .iter()
                .map(|p| (p.item_id.clone(), p.price, p.previous_price, p.changed, p.status))
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(key(&one), key(&back));
    }

    #[test]
    fn round_within_stays_in_bounds_on_a_step_or_a_bound(
        value in 0i64..1_000_000_000,
        min in 0i64..1_000_000_000,
        width in 0i64..10_000_000,
        step in prop::sample::select(STEPS.to_vec()),
    ) {
        let (min, max) = (Money::from_micros(min), Money::from_micros(min + width));
        let v = Money::from_micros(value).clamp(min, max);
        let r = round_within(v, Money::from_micros(step), min, max).value;
        prop_assert!(min <= r && r <= max);
        prop_assert!(r.micros() % step == 0 || r == min || r == max);
        // The nearest multiple inside the bounds is never farther than one step.
        if r.micros() % step == 0 {
            prop_assert!((r.micros() - v.micros()).abs() <= step);
        }
    }
}
