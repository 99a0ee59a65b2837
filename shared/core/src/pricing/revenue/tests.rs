use std::collections::BTreeMap;

use super::*;
use crate::entry::PricingModel;
use crate::pricing::testkit::{Builder, Item, Product, id, money, ts};
use crate::pricing::{Calculation, Trigger, calculate_with};

fn revenue() -> PricingModel {
    PricingModel::Revenue {
        max_step_change: None,
    }
}

/// A 30-day sales period in June 2026; `day` is the day of the calculation.
fn at(day: u32) -> Timestamp {
    ts(&format!("2026-06-{:02}T00:00:00Z", day))
}

fn june() -> (&'static str, &'static str) {
    ("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z")
}

/// Last year's edition: the same 30 days of June 2025.
fn june_2025() -> (&'static str, &'static str) {
    ("2025-06-01T00:00:00Z", "2025-07-01T00:00:00Z")
}

/// Gives every product of `b` the capacity `capacity` (`None`: none known).
fn set_capacity(b: &mut Builder, capacity: Option<u64>) {
    b.state
        .products
        .values_mut()
        .for_each(|p| p.properties.capacity = capacity);
}

fn run(state: &InstanceState, now: Timestamp, history: &ProjectHistory) -> Calculation {
    let (prices, exposures) = (BTreeMap::new(), BTreeMap::new());
    let previous = Previous {
        at: None,
        prices: &prices,
        exposures: &exposures,
    };
    calculate_with(state, true, Trigger::Request, now, &previous, &[], history)
}

fn explanation(c: &Calculation, item: &str) -> RevenueExplanation {
    match c.get(&id(item)).and_then(|p| p.explanation.model.clone()) {
        Some(ModelExplanation::Revenue(r)) => *r,
        other => panic!("not a revenue explanation: {other:?}"),
    }
}

fn one_item(expected_sales: f64) -> Builder {
    one_item_in(june(), expected_sales)
}

fn one_item_in(sales: (&'static str, &'static str), expected_sales: f64) -> Builder {
    one_item_stepped(sales, expected_sales, Product::default().step)
}

/// One item `ga` (min 20, max 200, default 60) of a product of 200 units, its prices on
/// the rounding grid `step`.
fn one_item_stepped(
    sales: (&'static str, &'static str),
    expected_sales: f64,
    step: &'static str,
) -> Builder {
    let mut b = Builder::new();
    b.product(
        "p",
        Product {
            capacity: Some(200),
            model: revenue(),
            expected_sales,
            step,
        },
    )
    .item(
        "ga",
        "p",
        Item {
            min: "20",
            max: "200",
            default: "60",
            sales,
            ..Item::default()
        },
    );
    b
}

/// Sells at the start of `day` (1 = the first) of the item's sales period.
fn sell(b: &mut Builder, item: &str, units: u64, price: f64, day: u32) {
    let it = b.state.items.get_mut(&id(item)).expect("item");
    let start = it.properties.sales_period.start.millis();
    let when = Timestamp::from_millis(start + i64::from(day - 1) * 86_400_000).expect("time");
    it.sold += units;
    record_sale(
        it,
        units,
        Money::from_f64(price).expect("money"),
        Some(when),
    );
    let it = &b.state.items[&id(item)];
    let product = b.state.products.get_mut(&it.product_id).expect("product");
    record_product_sale(
        product,
        it,
        units as i64,
        Money::from_f64(price).expect("money"),
        Some(when),
    );
}

#[test]
fn without_data_the_price_is_the_default_when_capacity_is_enough() {
    let b = one_item(0.9);
    let c = run(&b.state, at(1), &ProjectHistory::default());
    let p = c.get(&id("ga")).expect("priced");
    assert_eq!(p.price.to_f64(), 60.0);
    let e = explanation(&c, "ga");
    assert_eq!(e.bid_price, 0.0);
    assert_eq!(e.units_left, 200);
    assert_eq!(e.curve, CurveSource::Prior);
    assert!(!e.sells_out);
    assert!(
        p.exposure.is_some(),
        "the exposure is carried to the next calculation"
    );
}

/// The price and explanation of item `ga` calculated on `day` with no history.
fn price_on(b: &Builder, day: u32) -> (f64, RevenueExplanation) {
    let c = run(&b.state, at(day), &ProjectHistory::default());
    let price = c.get(&id("ga")).expect("priced").price.to_f64();
    (price, explanation(&c, "ga"))
}

/// Sells `per_day` units at 60 at the start of each of the first `days` days.
fn sell_daily(b: &mut Builder, per_day: u64, days: u32) {
    for day in 1..=days {
        sell(b, "ga", per_day, 60.0, day);
    }
}

#[test]
fn sales_as_a_low_belief_expects_cut_the_price_but_no_further_than_the_uninformed_limit() {
    // The user expects 120 of 200 units sold at 60, and less than half of that came in
    // half the period: at the prior price response the belief calls for 40 (the
    // revenue-maximising price), and the sales do not contradict it. Nothing has tested
    // the price response, so the cut stops at 11 % below the default.
    let mut b = one_item(0.6);
    sell_daily(&mut b, 3, 15);
    let (price, e) = price_on(&b, 16);
    assert_eq!(e.curve, CurveSource::Prior);
    assert!(
        (price - 60.0 * (1.0 - UNINFORMED_CUT)).abs() < 0.011,
        "{price} ({e:?})"
    );
}

#[test]
fn the_smaller_the_share_of_the_capacity_believed_sold_the_deeper_the_uninformed_cut() {
    // A user who expects to sell 20 % of the capacity or less at the default gets the
    // whole cut the belief calls for: 60 / 1.5 = 40, the revenue-maximising price at the
    // prior response. Half way between 60 % and 20 %, half way between the two cuts.
    let whole = 1.0 - 1.0 / demand::PRIOR_RELATIVE_RESPONSE;
    assert_eq!(uninformed_cut(1.0), UNINFORMED_CUT);
    assert_eq!(uninformed_cut(0.6), UNINFORMED_CUT);
    assert!((uninformed_cut(0.4) - (UNINFORMED_CUT + whole) / 2.0).abs() < 1e-12);
    assert!((uninformed_cut(0.2) - whole).abs() < 1e-12);
    assert!((uninformed_cut(0.0) - whole).abs() < 1e-12);
    for (share, expected) in [(0.2, 40.0), (0.4, 60.0 * (1.0 - uninformed_cut(0.4)))] {
        // Sales as the belief expects them, over the first half of the period.
        let mut b = one_item(share);
        let per_day = (share * 200.0 / 30.0).round() as u64;
        sell_daily(&mut b, per_day, 15);
        let (price, e) = price_on(&b, 16);
        assert!((price - expected).abs() < 0.011, "{share}: {price} ({e:?})");
    }
}

#[test]
fn sales_behind_a_belief_of_selling_out_do_not_cut_the_price() {
    // The user expects to sell out at 60; after two thirds of the period only 60 units
    // went. With the prior curve that is a late surge still to come as much as weak
    // demand, and the user's belief calls for no cut.
    let mut b = one_item(1.0);
    sell_daily(&mut b, 3, 20);
    let (price, e) = price_on(&b, 21);
    assert_eq!(price, 60.0, "{e:?}");
}

#[test]
fn sales_ahead_of_a_low_belief_hold_the_default() {
    // The user expects 100 units at 60 (a belief that calls for a cut), but 63 went in
    // the first 9 days; or 40 units (20 %: the deeper cut), but 90 went in the first 10
    // days. Read against a back-loaded curve the sales show more demand to come than the
    // units left, so the price does not go below 60, however small the belief.
    for (belief, per_day, days) in [(0.5, 7, 9), (0.2, 9, 10)] {
        let mut b = one_item(belief);
        sell_daily(&mut b, per_day, days);
        let (price, e) = price_on(&b, days + 1);
        assert!(price >= 60.0, "{belief}: {price} ({e:?})");
    }
}

#[test]
fn strong_early_sales_raise_the_price_and_the_bid_price() {
    let mut b = one_item(0.9);
    // 150 of 200 units gone in the first 10 days of 30.
    for day in 1..=10 {
        sell(&mut b, "ga", 15, 60.0, day);
    }
    let c = run(&b.state, at(11), &ProjectHistory::default());
    let e = explanation(&c, "ga");
    assert!(
        c.get(&id("ga")).expect("priced").price.to_f64() > 70.0,
        "{e:?}"
    );
    assert!(e.bid_price > 0.0, "capacity binds: {e:?}");
    assert_eq!(e.units_observed, 150);
    assert!(e.demand_level > 300.0, "{e:?}");
}

#[test]
fn items_of_a_product_share_one_bid_price() {
    let mut b = Builder::new();
    b.product(
        "p",
        Product {
            capacity: Some(100),
            model: revenue(),
            expected_sales: 1.0,
            ..Product::default()
        },
    );
    for (item, default) in [("standard", "50"), ("premium", "90")] {
        b.item(
            item,
            "p",
            Item {
                min: "10",
                max: "300",
                default,
                sales: june(),
                ..Item::default()
            },
        );
    }
    for day in 1..=6 {
        sell(&mut b, "standard", 8, 50.0, day);
        sell(&mut b, "premium", 4, 90.0, day);
    }
    let c = run(&b.state, at(7), &ProjectHistory::default());
    let (s, p) = (explanation(&c, "standard"), explanation(&c, "premium"));
    assert_eq!(s.bid_price, p.bid_price);
    assert!(s.bid_price > 0.0);
    assert_eq!(s.units_left, 100 - 72);
}

#[test]
fn without_a_capacity_the_model_keeps_the_default_and_says_why() {
    let mut b = one_item(0.9);
    set_capacity(&mut b, None);
    let c = run(&b.state, at(5), &ProjectHistory::default());
    assert_eq!(c.get(&id("ga")).expect("priced").price.to_f64(), 60.0);
    assert_eq!(explanation(&c, "ga").note, Some(ModelNote::NoCapacity));
}

#[test]
fn past_instances_give_the_product_its_curve() {
    let mut past = one_item_in(june_2025(), 0.9);
    for day in 25..=30 {
        sell(&mut past, "ga", 20, 60.0, day);
    }
    let history = ProjectHistory::learn([&past.state], at(2));
    let (curve, source) = history.curve(&ProductId::parse("p").expect("id"));
    assert_eq!(source, CurveSource::Learned);
    assert!(1.0 - curve.cumulative(0.8) > 0.4, "a late curve");
    let c = run(&one_item(0.9).state, at(2), &history);
    assert_eq!(explanation(&c, "ga").curve, CurveSource::Learned);
    let other = history.curve(&ProductId::parse("q").expect("id"));
    assert_eq!(other.1, CurveSource::Project);
}

#[test]
fn the_explanation_serializes_with_the_model_name() {
    let c = run(&one_item(0.9).state, at(3), &ProjectHistory::default());
    let json = serde_json::to_value(&c.get(&id("ga")).expect("priced").explanation).expect("json");
    assert_eq!(json["model"]["type"], "revenue");
    for key in [
        "demandLevel",
        "priceResponse",
        "unitsLeft",
        "timeLeft",
        "bidPrice",
        "expectedSales",
        "sellsOut",
        "unitsObserved",
        "demandObserved",
        "curve",
    ] {
        assert!(json["model"].get(key).is_some(), "{key} in {json}");
    }
}

#[test]
fn past_instances_set_the_demand_level_before_any_sale() {
    // The past edition sold 120 units at the default over its first 20 days, then sold
    // out: a level of about 180 over a whole period (the user said 0.5 * 200 = 100).
    let mut past = one_item_in(june_2025(), 0.5);
    set_capacity(&mut past, Some(120));
    for day in 1..=20 {
        sell(&mut past, "ga", 6, 60.0, day);
    }
    let history = ProjectHistory::learn([&past.state], at(1));
    let level = history
        .learned(&ProductId::parse("p").expect("id"))
        .expect("learned")
        .level;
    assert!((150.0..230.0).contains(&level), "level {level}");
    let c = run(&one_item(0.5).state, at(1), &history);
    let e = explanation(&c, "ga");
    assert!((e.demand_level / level - 1.0).abs() < 0.05, "{e:?}");
}

#[test]
fn a_sibling_instance_still_selling_does_not_pull_the_price_down() {
    // Two days of a festival on sale over the same 20 days, each with 180 units that the
    // user believes sell out at the default price. Both have sold 9 units a day for 10
    // days, on pace. The sibling's second half is still to come: unknown, not empty. Read
    // as empty it teaches a front-loaded curve and half the demand, and the price is cut;
    // read as unknown it teaches what last year's edition, which sold at this pace all
    // along, does.
    let period = ("2026-06-01T00:00:00Z", "2026-06-21T00:00:00Z");
    let last_year = ("2025-06-01T00:00:00Z", "2025-06-21T00:00:00Z");
    let (mut this, mut sibling, mut finished) = (
        one_item_in(period, 1.0),
        one_item_in(period, 1.0),
        one_item_in(last_year, 1.0),
    );
    for b in [&mut this, &mut sibling, &mut finished] {
        set_capacity(b, Some(180));
    }
    for day in 1..=10 {
        sell(&mut this, "ga", 9, 60.0, day);
        sell(&mut sibling, "ga", 9, 60.0, day);
    }
    for day in 1..=20 {
        sell(&mut finished, "ga", 9, 60.0, day);
    }
    let now = at(11);
    let p = ProductId::parse("p").expect("id");
    let history = ProjectHistory::learn([&sibling.state], now);
    let reference = ProjectHistory::learn([&finished.state], now);
    let level = history.learned(&p).expect("learned").level;
    assert!((170.0..190.0).contains(&level), "level {level}");
    let late = 1.0 - history.curve(&p).0.cumulative(0.5);
    assert!(late > 0.45, "the second half is not read as empty: {late}");
    let price = |h: &ProjectHistory| {
        run(&this.state, now, h)
            .get(&id("ga"))
            .expect("priced")
            .price
            .to_f64()
    };
    let (with_sibling, with_finished) = (price(&history), price(&reference));
    assert!(
        with_sibling >= 58.0,
        "on pace, the price stays near the default 60: {with_sibling} ({:?})",
        explanation(&run(&this.state, now, &history), "ga")
    );
    assert!(
        (with_sibling / with_finished - 1.0).abs() < 0.02,
        "{with_sibling} vs {with_finished} from a finished edition"
    );
}

#[test]
fn without_max_step_change_a_price_moves_at_most_a_quarter_per_calculation() {
    let mut b = one_item(0.9);
    // 150 of 200 units gone in 10 days of 30: the solved price is far above 60.
    for day in 1..=10 {
        sell(&mut b, "ga", 15, 60.0, day);
    }
    let free = run(&b.state, at(11), &ProjectHistory::default());
    assert!(free.get(&id("ga")).expect("priced").price.to_f64() > 75.0);
    let (prices, exposures) = (
        BTreeMap::from([(id("ga"), Money::from_f64(60.0).expect("money"))]),
        BTreeMap::new(),
    );
    let previous = Previous {
        at: None,
        prices: &prices,
        exposures: &exposures,
    };
    let c = calculate_with(
        &b.state,
        true,
        Trigger::Request,
        at(11),
        &previous,
        &[],
        &ProjectHistory::default(),
    );
    let p = c.get(&id("ga")).expect("priced");
    assert_eq!(p.price.to_f64(), 75.0, "60 * 1.25");
    let cap = p.explanation.max_step_change.as_ref().expect("capped");
    assert_eq!(cap.limit, DEFAULT_MAX_STEP_CHANGE);
    // A product's own maxStepChange replaces the default.
    b.state.products.values_mut().for_each(|p| {
        p.properties.pricing_model = PricingModel::Revenue {
            max_step_change: Some(0.5),
        }
    });
    let c = calculate_with(
        &b.state,
        true,
        Trigger::Request,
        at(11),
        &previous,
        &[],
        &ProjectHistory::default(),
    );
    assert!(c.get(&id("ga")).expect("priced").price.to_f64() > 75.0);
}

/// The calculation of `state` at `now` after `previous` (its time, prices and exposures).
fn run_after(
    state: &InstanceState,
    now: Timestamp,
    history: &ProjectHistory,
    previous: &Calculation,
) -> Calculation {
    let prices = crate::pricing::prices_by_item(&previous.prices);
    let exposures = crate::pricing::exposures_by_item(&previous.prices);
    let last = Previous {
        at: Some(previous.calculated_at),
        prices: &prices,
        exposures: &exposures,
    };
    calculate_with(state, true, Trigger::Schedule, now, &last, &[], history)
}

/// Prices `ga` every 6 hours from day 1 to the start of `until`, selling `per_day(day)`
/// units at the price of the moment at the start of each day; returns the last
/// calculation.
fn trade(
    b: &mut Builder,
    until: u32,
    history: &ProjectHistory,
    per_day: impl Fn(u32) -> u64,
) -> Calculation {
    let mut last = run(&b.state, at(1), history);
    for day in 1..until {
        let price = last.get(&id("ga")).expect("priced").price.to_f64();
        sell(b, "ga", per_day(day), price, day);
        for quarter in 1..=4 {
            let start = at(day).millis() + i64::from(quarter) * 6 * 3_600_000;
            let now = Timestamp::from_millis(start).expect("time");
            last = run_after(&b.state, now, history, &last);
        }
    }
    last
}

#[test]
fn without_history_a_late_surge_raises_the_price_within_a_day() {
    // The user expects 170 of 200 units at 60; they sell at that pace (5.7 a day) for 25
    // days. Then buyers come at six times the pace.
    let steady = |_| 6;
    let surge = |day| if day >= 26 { 36 } else { 6 };
    let mut calm = one_item(0.85);
    let before = trade(&mut calm, 27, &ProjectHistory::default(), steady);
    let mut busy = one_item(0.85);
    let after = trade(&mut busy, 27, &ProjectHistory::default(), surge);
    let (calm_e, busy_e) = (explanation(&before, "ga"), explanation(&after, "ga"));
    assert_eq!(calm_e.recent_pace, 1.0, "{calm_e:?}");
    assert!(busy_e.recent_pace > 2.0, "{busy_e:?}");
    let (calm_p, busy_p) = (
        before.get(&id("ga")).expect("priced").price.to_f64(),
        after.get(&id("ga")).expect("priced").price.to_f64(),
    );
    assert!(
        busy_p > calm_p * 1.2,
        "{busy_p} after the surge, {calm_p} without"
    );
    assert!(
        busy_e.bid_price > calm_e.bid_price,
        "capacity is scarcer: {busy_e:?}"
    );
    // The curve follows the instance's own sales: the surge also tilts it toward the
    // event (a burst counts at most twice the mean day, so only a little).
    assert!(
        busy_e.demand_left >= calm_e.demand_left && busy_e.demand_left < calm_e.demand_left * 1.2,
        "the curve's share: {} after the surge, {} without",
        busy_e.demand_left,
        calm_e.demand_left
    );
}

#[test]
fn a_surge_after_a_cut_is_not_read_as_a_steeper_price_response() {
    // The user expects 100 of 200 units at 60, and buyers come at that pace for 25 days:
    // the model cuts below 60. Then buyers come six times faster, while the price is
    // still the cut one. Read by the fit, the many units sold below the default look like
    // buyers who respond steeply to price (which would cut the price again); while the
    // pace is read, the price response stays where it was before the surge.
    let mut b = one_item(0.5);
    let history = ProjectHistory::default();
    let before = trade(&mut b, 26, &history, |_| 3);
    let cut = before.get(&id("ga")).expect("priced").price.to_f64();
    assert!(cut < 60.0, "the model cut the price: {cut}");
    let mut last = before.clone();
    let mut read = 0;
    for day in 26..29 {
        let price = last.get(&id("ga")).expect("priced").price.to_f64();
        sell(&mut b, "ga", 20, price, day);
        for quarter in 1..=4 {
            let start = at(day).millis() + i64::from(quarter) * 6 * 3_600_000;
            let now = Timestamp::from_millis(start).expect("time");
            let next = run_after(&b.state, now, &history, &last);
            let (was, is) = (explanation(&last, "ga"), explanation(&next, "ga"));
            if is.recent_pace > 1.0 {
                read += 1;
                assert_eq!(is.price_response, was.price_response, "{is:?}");
            }
            last = next;
        }
    }
    assert!(read >= 8, "the surge is read: {read} calculations");
}

#[test]
fn a_learned_curve_expects_its_surge_and_reads_no_pace() {
    // Last June's edition sold most of its units in the last days: the curve is learned,
    // and this year's surge is what it expects.
    let mut past = one_item_in(june_2025(), 0.85);
    for day in 1..=30 {
        sell(&mut past, "ga", if day >= 26 { 25 } else { 2 }, 60.0, day);
    }
    let history = ProjectHistory::learn([&past.state], at(1));
    let mut b = one_item(0.85);
    let c = trade(&mut b, 27, &history, |day| if day >= 26 { 25 } else { 2 });
    let e = explanation(&c, "ga");
    assert_eq!(e.curve, CurveSource::Learned);
    assert_eq!(e.recent_pace, 1.0, "{e:?}");
}

/// `previous` with every exposure as a build before the recent pace stored it (no pace).
fn without_pace(mut previous: Calculation) -> Calculation {
    for p in &mut previous.prices {
        if let Some(e) = p.exposure.as_mut() {
            e.pace = None;
        }
    }
    previous
}

#[test]
fn an_exposure_stored_before_the_pace_does_not_read_past_sales_as_a_surge() {
    // 100 units sold in 20 days at the believed pace; the calculation before this one
    // was stored by a build that kept no pace.
    let mut b = one_item(0.85);
    let last = trade(&mut b, 21, &ProjectHistory::default(), |_| 5);
    let next = run_after(
        &b.state,
        Timestamp::from_millis(last.calculated_at.millis() + 3_600_000).expect("time"),
        &ProjectHistory::default(),
        &without_pace(last.clone()),
    );
    let e = explanation(&next, "ga");
    assert_eq!(e.recent_pace, 1.0, "{e:?}");
    assert_eq!(e.units_observed, 100);
}

#[test]
fn a_capacity_set_late_does_not_read_the_sales_before_it_as_a_surge() {
    // Priced without a capacity (no estimate kept) for 20 days while 100 units sold; then
    // the product gets its capacity, and 5 more units sell just before it is priced.
    let mut b = one_item(0.85);
    set_capacity(&mut b, None);
    let last = trade(&mut b, 21, &ProjectHistory::default(), |_| 5);
    assert_eq!(
        explanation(&last, "ga").note,
        Some(ModelNote::NoCapacity),
        "priced without a capacity"
    );
    set_capacity(&mut b, Some(200));
    sell(&mut b, "ga", 5, 60.0, 21);
    let next = run_after(
        &b.state,
        Timestamp::from_millis(last.calculated_at.millis() + 3_600_000).expect("time"),
        &ProjectHistory::default(),
        &last,
    );
    let e = explanation(&next, "ga");
    assert_eq!(e.recent_pace, 1.0, "{e:?}");
}

/// A product with a general item (default 60) and a premium one (default 150).
fn two_items_in(sales: (&'static str, &'static str)) -> Builder {
    let mut b = one_item_in(sales, 0.9);
    b.item(
        "vip",
        "p",
        Item {
            min: "50",
            max: "400",
            default: "150",
            sales,
            ..Item::default()
        },
    );
    b
}

#[test]
fn past_instances_split_the_level_among_the_items_as_they_sold() {
    // Last year the general item sold nine units for every one of the premium item, at
    // their defaults. This year each starts from its own part of the product's level,
    // not from half of it (half would expect five times the premium item's demand).
    let mut past = two_items_in(june_2025());
    for day in 1..=30 {
        sell(&mut past, "ga", 6, 60.0, day);
        if day % 3 == 0 {
            sell(&mut past, "vip", 2, 150.0, day);
        }
    }
    let history = ProjectHistory::learn([&past.state], at(1));
    let learned = history
        .learned(&ProductId::parse("p").expect("id"))
        .expect("learned");
    let ids = [id("ga"), id("vip")];
    let shares = learned.item_shares(&ids).expect("both items sold");
    assert!((shares[1] - 0.1).abs() < 0.01, "{shares:?}");
    let c = run(&two_items_in(june()).state, at(1), &history);
    let (ga, vip) = (explanation(&c, "ga"), explanation(&c, "vip"));
    let ratio = vip.demand_level / (ga.demand_level + vip.demand_level);
    assert!((0.07..0.13).contains(&ratio), "vip {vip:?} ga {ga:?}");
    // An item the past instances do not tell (new, or never sold) takes an equal share;
    // the known ones split the rest as they sold.
    let ids = [id("ga"), id("vip"), id("new")];
    let shares = learned.item_shares(&ids).expect("two known");
    assert!((shares[2] - 1.0 / 3.0).abs() < 1e-9, "{shares:?}");
    assert!(
        (shares[1] / shares[0] - 21.0 / 181.0).abs() < 1e-9,
        "{shares:?}"
    );
    assert_eq!(learned.item_shares(&[id("new")]), None, "none known: equal");
}

#[test]
fn without_history_sales_rising_toward_the_event_leave_more_demand_to_come() {
    // Two new projects sell about the same units in the first half of the period: one
    // at an even pace, the other slowly at first and faster every day. The second reads
    // its own curve as rising and expects more of its demand still to come.
    let mut flat = one_item(0.85);
    let even = trade(&mut flat, 16, &ProjectHistory::default(), |_| 6);
    let mut rising = one_item(0.85);
    let faster = trade(&mut rising, 16, &ProjectHistory::default(), |day| {
        1 + u64::from(day) * 2 / 3
    });
    let (even_e, faster_e) = (explanation(&even, "ga"), explanation(&faster, "ga"));
    assert!(
        faster_e.demand_left > even_e.demand_left + 0.03,
        "rising sales leave {} of the demand to come, even ones {}",
        faster_e.demand_left,
        even_e.demand_left
    );
    assert!(
        (even_e.demand_left - even_e.time_left).abs() < 0.03,
        "even sales keep the curve about flat: {even_e:?}"
    );
    let price = |c: &Calculation| c.get(&id("ga")).expect("priced").price.to_f64();
    assert!(
        price(&faster) >= price(&even),
        "{} rising, {} even",
        price(&faster),
        price(&even)
    );
}

#[test]
fn poisson_lower_tail_matches_the_sums() {
    // P(X <= k) by the terms e^-m m^i / i!, summed directly in log space.
    let direct = |k: u64, m: f64| -> f64 {
        let mut ln_term = -m;
        let mut sum = ln_term.exp();
        for i in 1..=k {
            ln_term += m.ln() - (i as f64).ln();
            sum += ln_term.exp();
        }
        sum
    };
    assert!((poisson_lower_tail(0, 7.0) - (-7.0f64).exp()).abs() < 1e-15);
    assert!((poisson_lower_tail(2, 10.0) - 61.0 * (-10.0f64).exp()).abs() < 1e-15);
    for (k, m) in [(5, 30.0), (100, 400.0), (300, 600.0), (1_000, 1_500.0)] {
        let (got, want) = (poisson_lower_tail(k, m), direct(k, m));
        assert!(
            (got / want - 1.0).abs() < 1e-9,
            "{k}, {m}: {got} against {want}"
        );
    }
    // At or above the mean nothing is refuted; a mean that is no number refutes nothing.
    assert_eq!(poisson_lower_tail(10, 10.0), 1.0);
    assert_eq!(poisson_lower_tail(11, 10.0), 1.0);
    assert_eq!(poisson_lower_tail(0, f64::NAN), 1.0);
    assert_eq!(poisson_lower_tail(0, f64::INFINITY), 1.0);
}

#[test]
fn a_default_no_buyer_pays_is_released_from_the_cut_floors_and_steps_down() {
    // The user expects 180 of 200 units at 60, and nobody buys. Before the refutation the
    // cut floor holds the price at 11 % below the default. After 5 days the back-loaded
    // reading expects 12 units: no sale at all is already beyond chance, but too few
    // units are expected to refute the belief (a slow start of late buyers looks like
    // it). From the sixth day's evening (15 expected) the floors let go and each
    // calculation takes the price 5 % lower, down to 30 % below the default (42): lower
    // only where the fit's own price goes. (Before, the price stayed at 53.40 for the
    // whole period: buyers paying 20 to 50 never met it.)
    let mut b = one_item(0.9);
    let early = trade(&mut b, 6, &ProjectHistory::default(), |_| 0);
    let price = |c: &Calculation| c.get(&id("ga")).expect("priced").price.to_f64();
    assert!(price(&early) >= 60.0 * (1.0 - UNINFORMED_CUT) - 0.01);
    assert!(!explanation(&early, "ga").belief_refuted);
    let mut b = one_item(0.9);
    let before = trade(&mut b, 7, &ProjectHistory::default(), |_| 0);
    let now = Timestamp::from_millis(before.calculated_at.millis() + 6 * 3_600_000).expect("time");
    let after = run_after(&b.state, now, &ProjectHistory::default(), &before);
    let e = explanation(&after, "ga");
    assert!(e.belief_refuted, "{e:?}");
    assert!(
        price(&before) < 60.0 * (1.0 - UNINFORMED_CUT) - 0.01,
        "{}",
        price(&before)
    );
    assert!(
        price(&after)
            <= (price(&before) * (1.0 - DESCENT_STEP))
                .max(42.0)
                .min(price(&before)),
        "{} after {}",
        price(&after),
        price(&before)
    );
    let exposure = after.get(&id("ga")).and_then(|p| p.exposure.clone());
    assert!(exposure.is_some_and(|x| x.released));
    // Days later it is at the descent's floor or below it, where only the fit's own
    // price goes.
    let mut b = one_item(0.9);
    let later = trade(&mut b, 12, &ProjectHistory::default(), |_| 0);
    assert!(price(&later) <= 42.0 + 0.001, "{}", price(&later));
}

#[test]
fn once_released_a_product_stays_released_and_stops_descending_when_buyers_come() {
    // Nothing sells for 8 days, then 12 a day (more than the belief's 6): the sales no
    // longer refute the belief, so the prices stop stepping down, but the floors do not
    // come back (they would lift the price to the default's again, where nobody bought).
    let mut b = one_item(0.9);
    let c = trade(&mut b, 18, &ProjectHistory::default(), |day| {
        if day < 9 { 0 } else { 12 }
    });
    let e = explanation(&c, "ga");
    assert!(e.belief_refuted, "{e:?}");
    let now = Timestamp::from_millis(c.calculated_at.millis() + 6 * 3_600_000).expect("time");
    let next = run_after(&b.state, now, &ProjectHistory::default(), &c);
    let price = |c: &Calculation| c.get(&id("ga")).expect("priced").price.to_f64();
    assert!(
        price(&next) > price(&c) * (1.0 - DESCENT_STEP) + 0.005,
        "{} after {}: still descending",
        price(&next),
        price(&c)
    );
    assert!(explanation(&next, "ga").belief_refuted);
}

#[test]
fn sales_under_a_third_of_the_belief_keep_a_released_product_descending() {
    // Nothing for 8 days (released), then 2 a day: by day 16 the 14 units are under 35 %
    // of what the belief expects by then (64 read against the back-loaded curve), so the
    // product is still released and its prices stay on the descent (at its floor, 42, by
    // now), far below where the floors would hold them (53.40).
    let mut b = one_item(0.9);
    let c = trade(&mut b, 16, &ProjectHistory::default(), |day| {
        if day < 9 { 0 } else { 2 }
    });
    let now = Timestamp::from_millis(c.calculated_at.millis() + 6 * 3_600_000).expect("time");
    let next = run_after(&b.state, now, &ProjectHistory::default(), &c);
    let price = |c: &Calculation| c.get(&id("ga")).expect("priced").price.to_f64();
    assert!(explanation(&next, "ga").belief_refuted);
    assert!(
        price(&next) < 60.0 * (1.0 - UNINFORMED_CUT) - 0.01,
        "{}",
        price(&next)
    );
    assert!(
        price(&next) < price(&c) || price(&next) <= 42.0 + 0.001,
        "{} after {}",
        price(&next),
        price(&c)
    );
}

#[test]
fn demand_below_the_belief_is_not_a_refutation() {
    // 40 % below the belief (3.6 a day against 6) for two thirds of the period: the cut
    // floors keep doing their work, nothing is released.
    let mut b = one_item(0.9);
    let c = trade(&mut b, 21, &ProjectHistory::default(), |day| {
        if day % 5 < 3 { 4 } else { 3 }
    });
    let e = explanation(&c, "ga");
    assert!(!e.belief_refuted, "{e:?}");
    assert!(
        c.get(&id("ga")).expect("priced").price.to_f64() >= 60.0 * (1.0 - UNINFORMED_CUT) - 0.01
    );
}

#[test]
fn the_descent_takes_at_least_one_rounding_step() {
    // Prices on a grid of 5: 5 % of 45 rounds back to 45, so the descent must take a
    // whole step (before, it stayed at 45 for the rest of the period); it stops at its
    // floor, 42, which rounds to 40.
    let mut b = one_item_stepped(june(), 0.9, "5");
    let c = trade(&mut b, 14, &ProjectHistory::default(), |_| 0);
    let price = c.get(&id("ga")).expect("priced").price.to_f64();
    assert!(explanation(&c, "ga").belief_refuted);
    assert!(price <= 40.0, "{price}");
}

#[test]
fn a_removed_items_sales_still_answer_the_belief() {
    // `ga` sold 60 units in 6 days, as the product's belief expects, and is removed: the
    // belief is the product's, and its sales still count, so `vip` is not released.
    let mut b = two_items_in(june());
    for day in 1..=6 {
        sell(&mut b, "ga", 10, 60.0, day);
    }
    b.state.items.get_mut(&id("ga")).expect("item").removed = true;
    let c = run(&b.state, at(10), &ProjectHistory::default());
    let e = explanation(&c, "vip");
    assert!(!e.belief_refuted, "{e:?}");
}

#[test]
fn a_previous_price_of_0_is_not_stepped_down_from() {
    // Released and descending, but the previous price was 0: 5 % below it is nothing to
    // go by (as maxStepChange caps nothing from 0), so the model's own price stands
    // instead of the item's min.
    let mut b = one_item(0.9);
    let mut before = trade(&mut b, 8, &ProjectHistory::default(), |_| 0);
    for p in before.prices.iter_mut() {
        p.price = Money::ZERO;
    }
    let now = Timestamp::from_millis(before.calculated_at.millis() + 6 * 3_600_000).expect("time");
    let after = run_after(&b.state, now, &ProjectHistory::default(), &before);
    assert!(explanation(&after, "ga").belief_refuted);
    let price = after.get(&id("ga")).expect("priced").price.to_f64();
    assert!(price > 20.0, "{price}");
}

#[test]
fn with_a_learned_curve_the_release_is_not_claimed() {
    // The flag rides on the exposure, but a learned curve prices without floors anyway:
    // the explanation does not say the belief was refuted.
    let mut b = one_item(0.9);
    let before = trade(&mut b, 10, &ProjectHistory::default(), |_| 0);
    assert!(explanation(&before, "ga").belief_refuted);
    let mut past = one_item_in(june_2025(), 0.9);
    for day in 1..=30 {
        sell(&mut past, "ga", 2, 30.0, day);
    }
    let now = Timestamp::from_millis(before.calculated_at.millis() + 6 * 3_600_000).expect("time");
    let history = ProjectHistory::learn([&past.state], now);
    let after = run_after(&b.state, now, &history, &before);
    let e = explanation(&after, "ga");
    assert_eq!(e.curve, CurveSource::Learned);
    assert!(!e.belief_refuted, "{e:?}");
    let carried = after.get(&id("ga")).and_then(|p| p.exposure.clone());
    assert!(carried.is_some_and(|x| x.released), "kept on the exposure");
}

#[test]
fn a_descent_steps_down_to_its_floor_and_never_up() {
    // (the fit's price, the previous price, the descent's floor, the rounding step, min)
    let cases = [
        ((80.0, 60.0, 42.0, 0.01, 20.0), 57.0), // 5 % below the previous price
        ((50.0, 60.0, 42.0, 0.01, 20.0), 50.0), // the fit's own price is lower
        ((80.0, 43.0, 42.0, 0.01, 20.0), 42.0), // not below the floor by itself
        ((80.0, 40.0, 42.0, 0.01, 20.0), 40.0), // under the floor already: not up
        ((30.0, 40.0, 42.0, 0.01, 20.0), 30.0), // the fit's own price goes lower
        ((80.0, 45.0, 20.0, 5.0, 20.0), 40.0),  // a whole rounding step
        ((80.0, 40.0, 42.0, 0.01, 50.0), 50.0), // never under the item's min
    ];
    for ((price, previous, lowest, step, min), want) in cases {
        let got = descended(price, previous, lowest, step, min);
        assert!(
            (got - want).abs() < 1e-9,
            "{price} {previous} {lowest} {step} {min}: {got}"
        );
    }
}

#[test]
fn what_the_product_cannot_sell_is_not_expected_of_it() {
    // Nothing sells in 10 days, but 190 of the 200 units are reserved (or the item has 5
    // in circulation): the belief can expect no more than what is left to sell, under the
    // 15 units that a release needs.
    let reserved = |b: &mut Builder| {
        b.state
            .products
            .get_mut(&ProductId::parse("p").expect("id"))
            .expect("p")
            .reserved = 190
    };
    let total = |b: &mut Builder| b.state.items.get_mut(&id("ga")).expect("ga").total = Some(5);
    for limit in [reserved, total] {
        let mut b = one_item(0.9);
        limit(&mut b);
        let c = trade(&mut b, 11, &ProjectHistory::default(), |_| 0);
        assert!(!explanation(&c, "ga").belief_refuted);
    }
}

#[test]
fn the_release_outlives_a_calculation_without_a_capacity() {
    // Released, then the capacity is unknown for a calculation (the model keeps the
    // default and says so): the flag is carried, and holds when the capacity is back.
    let mut b = one_item(0.9);
    let released = trade(&mut b, 10, &ProjectHistory::default(), |_| 0);
    assert!(explanation(&released, "ga").belief_refuted);
    set_capacity(&mut b, None);
    let now = Timestamp::from_millis(released.calculated_at.millis() + 3_600_000).expect("time");
    let without = run_after(&b.state, now, &ProjectHistory::default(), &released);
    assert_eq!(
        explanation(&without, "ga").note,
        Some(ModelNote::NoCapacity)
    );
    let carried = without.get(&id("ga")).and_then(|p| p.exposure.clone());
    assert!(carried.is_some_and(|x| x.released));
    set_capacity(&mut b, Some(200));
    let later = Timestamp::from_millis(now.millis() + 3_600_000).expect("time");
    let back = run_after(&b.state, later, &ProjectHistory::default(), &without);
    assert!(explanation(&back, "ga").belief_refuted);
}

#[test]
fn an_item_with_its_own_total_sells_no_more_than_it_has_left() {
    // Of a product of 200 units, the general item has its own total of 10 (itemQuantity),
    // all sold. The model expects it to sell nothing more (it used to plan 89 more units
    // of it and price the premium item as if they were coming), and prices it at its max,
    // as a sold-out product is priced.
    let mut b = two_items_in(june());
    let ga = b.state.items.get_mut(&id("ga")).expect("ga");
    ga.total = Some(10);
    ga.sold = 10;
    let c = run(&b.state, at(10), &ProjectHistory::default());
    let (ga, vip) = (explanation(&c, "ga"), explanation(&c, "vip"));
    assert_eq!(ga.remaining_demand, 0.0, "{ga:?}");
    assert_eq!(c.get(&id("ga")).expect("ga").price, money("200"), "{ga:?}");
    assert!(
        (ga.expected_sales - vip.remaining_demand).abs() < 1e-9,
        "the product expects only the premium item's sales: {ga:?} {vip:?}"
    );
    // With 3 of its 10 left, it sells at most 3: its price rises to where its believed
    // demand is 3 (no buyer turned away at a price it could raise).
    let ga = b.state.items.get_mut(&id("ga")).expect("ga");
    ga.sold = 7;
    let c = run(&b.state, at(10), &ProjectHistory::default());
    let e = explanation(&c, "ga");
    assert!((e.remaining_demand - 3.0).abs() < 1e-6, "{e:?}");
    assert!(c.get(&id("ga")).expect("ga").price > money("60"), "{e:?}");
}

#[test]
fn a_free_item_is_expected_to_take_its_believed_demand_not_four_times_it() {
    // A free child ticket (min = max = default = 0) beside an adult one, capacity to
    // spare (the user expects to sell half). The free item's expected sales are its share
    // of the belief; they were 4.5 times that (its default read as 1e-6, its price 0
    // below it at a response of 1.5 / 1e-6), which filled the capacity and raised the
    // adult price by 60 % on the first calculation.
    let mut b = Builder::new();
    b.product(
        "p",
        Product {
            capacity: Some(100),
            model: revenue(),
            expected_sales: 0.5,
            ..Product::default()
        },
    );
    let sales = june();
    for (item, (min, max, default)) in [("adult", ("30", "80", "45")), ("child", ("0", "0", "0"))] {
        b.item(
            item,
            "p",
            Item {
                min,
                max,
                default,
                sales,
                ..Item::default()
            },
        );
    }
    let c = run(&b.state, at(1), &ProjectHistory::default());
    let (adult, child) = (explanation(&c, "adult"), explanation(&c, "child"));
    assert!(
        child.remaining_demand <= 25.0 * child.demand_left + 1e-9,
        "{child:?}"
    );
    assert_eq!(adult.bid_price, 0.0, "capacity to spare: {adult:?}");
    assert_eq!(c.get(&id("child")).expect("child").price, money("0"));
    assert!(
        c.get(&id("adult")).expect("adult").price <= money("45"),
        "{adult:?}"
    );
    // A free item that may be priced up to 50 is still free (the pipeline prices a base
    // of 0 at its min): with 4 seats left of 100 the plan reads its buyers at 0, not at a
    // bid price it never gets (it planned the child at 33.66 and priced the adult as if
    // the seats left were all its own).
    let child = b.state.items.get_mut(&id("child")).expect("child");
    child.properties.price_settings.max = money("50");
    let adult = b.state.items.get_mut(&id("adult")).expect("adult");
    adult.sold = 96;
    let c = run(&b.state, at(20), &ProjectHistory::default());
    let (adult, child) = (explanation(&c, "adult"), explanation(&c, "child"));
    assert_eq!(c.get(&id("child")).expect("child").price, money("0"));
    assert!(child.remaining_demand > 0.0, "{child:?}");
    // (Sales, not demand: at most the 4 units left.)
    let demand = adult.remaining_demand + child.remaining_demand;
    assert!(
        (adult.expected_sales - demand.min(4.0)).abs() < 1e-6,
        "the product expects the free item's buyers too: {adult:?} {child:?}"
    );
}

#[test]
fn an_item_first_priced_mid_sale_is_not_refuted_by_sales_the_service_never_saw() {
    // Connected on day 11 of 30 with none of the earlier sales sent: nothing the service
    // saw was missing, so the floors hold (the first calculation used to release them and
    // price the item at its min). Once the service itself has watched long enough for the
    // belief to expect 15 units and none came, the floors let go as for any product.
    let b = one_item(0.9);
    let price = |c: &Calculation| c.get(&id("ga")).expect("priced").price.to_f64();
    let first = run(&b.state, at(11), &ProjectHistory::default());
    let e = explanation(&first, "ga");
    assert!(!e.belief_refuted, "{e:?}");
    assert!(
        price(&first) >= 60.0 * (1.0 - UNINFORMED_CUT) - 0.01,
        "{e:?}"
    );
    let observed = first.get(&id("ga")).and_then(|p| p.exposure.clone());
    let from = observed
        .and_then(|x| x.observed_from)
        .expect("observed from");
    assert!((from - 10.0 / 30.0).abs() < 1e-9, "{from}");
    // A day later still nothing: the back-loaded reading expects about 5 units since.
    let next = run_after(&b.state, at(12), &ProjectHistory::default(), &first);
    assert!(!explanation(&next, "ga").belief_refuted);
    // Six days after the first calculation: about 35 expected since, none came.
    let mut last = next;
    for day in 13..=17 {
        last = run_after(&b.state, at(day), &ProjectHistory::default(), &last);
    }
    let e = explanation(&last, "ga");
    assert!(e.belief_refuted, "{e:?}");
}

#[test]
fn expected_sales_are_at_most_the_units_left() {
    // The general item's price is held by its bounds (min = max = 60), and 40 of it
    // sold in the last day of a product of 60: its demand at 60 is more than the 20 units
    // left, so the product is expected to sell out, and to sell 20, not its demand (an
    // outside probe saw 98.9 expected with 60 left, and 0.33 with none).
    let mut b = two_items_in(june());
    let ps = &mut b
        .state
        .items
        .get_mut(&id("ga"))
        .expect("ga")
        .properties
        .price_settings;
    (ps.min, ps.max) = (money("60"), money("60"));
    set_capacity(&mut b, Some(60));
    sell(&mut b, "ga", 40, 60.0, 9);
    let c = run(&b.state, at(10), &ProjectHistory::default());
    let e = explanation(&c, "vip");
    assert_eq!(e.units_left, 20, "{e:?}");
    assert!(e.sells_out, "{e:?}");
    assert!(e.expected_sales <= 20.0, "{e:?}");
    let demand = explanation(&c, "ga").remaining_demand + explanation(&c, "vip").remaining_demand;
    assert!(demand > 20.0, "the demand is more: {demand}");
    // Sold out: nothing more is expected.
    b.state.items.get_mut(&id("ga")).expect("ga").sold = 60;
    let c = run(&b.state, at(10), &ProjectHistory::default());
    let e = explanation(&c, "ga");
    assert_eq!((e.units_left, e.expected_sales), (0, 0.0), "{e:?}");
}
