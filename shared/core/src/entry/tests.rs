//! Syntactic validation of every entry kind (DESIGN.md section 5): accepted shapes, removed
//! forms with their replacement, ranges, and the exact JSON Pointer of every error.

use serde_json::json;

use super::*;
use crate::validate::FieldError;

const NOW: &str = "2026-05-19T12:00:00Z";

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("a valid timestamp")
}

fn at_submission() -> ParseOptions {
    ParseOptions {
        now: Some(ts(NOW)),
        plain: true,
    }
}

fn run(v: &Value, ptr: &str) -> (Option<Entry>, Vec<FieldError>) {
    let mut errors = Errors::default();
    let entry = parse_entry(v, ptr, at_submission(), &mut errors);
    (entry, errors.list)
}

#[track_caller]
fn ok(v: Value) -> Entry {
    let (entry, errors) = run(&v, "");
    assert!(errors.is_empty(), "unexpected errors: {errors:#?}");
    entry.expect("an entry when there are no errors")
}

#[track_caller]
fn kind(v: Value) -> EntryKind {
    ok(v).kind
}

#[track_caller]
fn bad_at(v: Value, ptr: &str) -> Vec<FieldError> {
    let (entry, errors) = run(&v, ptr);
    assert!(entry.is_none(), "an entry despite the errors {errors:#?}");
    assert!(!errors.is_empty(), "refused without saying why");
    errors
}

#[track_caller]
fn bad(v: Value) -> Vec<FieldError> {
    bad_at(v, "")
}

/// The one error of an entry.
#[track_caller]
fn single(v: Value) -> FieldError {
    let mut errors = bad(v);
    assert_eq!(errors.len(), 1, "expected one error: {errors:#?}");
    errors.remove(0)
}

/// (pointer, code) of each error, sorted (where the order follows a map's keys).
fn sorted(errors: &[FieldError]) -> Vec<(&str, &str)> {
    let mut v = pc(errors);
    v.sort_unstable();
    v
}

/// (pointer, code) of each error, in order.
fn pc(errors: &[FieldError]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .map(|e| (e.pointer.as_str(), e.code.as_str()))
        .collect()
}

fn owned(errors: &[FieldError]) -> Vec<(String, String)> {
    errors
        .iter()
        .map(|e| (e.pointer.clone(), e.code.clone()))
        .collect()
}

fn one(pointer: &str, code: &str) -> Vec<(String, String)> {
    vec![(pointer.to_owned(), code.to_owned())]
}

#[track_caller]
fn assert_removed(e: &FieldError, pointer: &str, replacement: &str) {
    assert_eq!(e.pointer, pointer, "{e:?}");
    assert_eq!(e.code, codes::REMOVED, "{e:?}");
    assert!(
        e.message.contains(replacement),
        "the message should name the replacement `{replacement}`: {}",
        e.message
    );
}

fn entry(type_name: &str, data: Value) -> Value {
    json!({ "type": type_name, "data": data })
}

fn period() -> Value {
    json!({"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"})
}

fn item_data() -> Value {
    json!({
        "itemId": "A",
        "productId": "P",
        "salesPeriod": period(),
        "priceSettings": {"min": 10, "max": 100, "default": 50}
    })
}

fn item_reg(data: Value) -> Value {
    entry("itemRegistration", data)
}

/// Sets `value` at `pointer` (its parent must be an object).
fn set(mut v: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    v.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("an object parent")
        .insert(key.to_owned(), value);
    v
}

fn unset(mut v: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    v.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("an object parent")
        .remove(key);
    v
}

fn money(v: f64) -> Money {
    Money::from_f64(v).expect("valid money")
}

// ---------------------------------------------------------------------------------------
// The envelope: type, transactionId, timestamp, data.

#[test]
fn envelope_fields_are_read() {
    let e = ok(json!({
        "type": "itemRemoval",
        "transactionId": "tx-1:a.b~c_d",
        "timestamp": "2026-05-19T11:00:00+01:00",
        "data": {"itemId": "A"}
    }));
    assert_eq!(
        e.transaction_id,
        Some(TransactionId::parse("tx-1:a.b~c_d").expect("valid"))
    );
    assert_eq!(e.timestamp, Some(ts("2026-05-19T10:00:00Z")));
    assert_eq!(
        e.kind,
        EntryKind::ItemRemoval {
            item_id: ItemId::parse("A").expect("valid")
        }
    );
    assert_eq!(e.kind.type_name(), "itemRemoval");
    let e = ok(entry("itemRemoval", json!({"itemId": "A"})));
    assert_eq!((e.transaction_id, e.timestamp), (None, None));
}

#[test]
fn envelope_errors_point_into_the_entry() {
    assert_eq!(
        pc(&bad_at(json!("itemSale"), "/entries/0")),
        [("/entries/0", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(json!({"data": {"itemId": "A"}}))),
        [("/type", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(json!({"type": 7, "data": {}}))),
        [("/type", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(json!({"type": "itemRemoval"}))),
        [("/data", codes::REQUIRED)]
    );
    // null counts as absent.
    assert_eq!(
        pc(&bad(json!({"type": "itemRemoval", "data": null}))),
        [("/data", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(json!({"type": "itemRemoval", "data": []}))),
        [("/data", codes::TYPE)]
    );
    let e = single(entry("itemTeleport", json!({})));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/type", codes::UNKNOWN_TYPE)
    );
    assert!(e.message.contains("itemTeleport"));
    assert_eq!(
        pc(&bad_at(
            json!({"type": "itemRemoval", "transactionId": "has space", "data": {"itemId": "A"}}),
            "/entries/2"
        )),
        [("/entries/2/transactionId", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(
            json!({"type": "itemRemoval", "transactionId": "", "data": {"itemId": "A"}})
        )),
        [("/transactionId", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(
            json!({"type": "itemRemoval", "timestamp": "yesterday", "data": {"itemId": "A"}})
        )),
        [("/timestamp", codes::FORMAT)]
    );
}

#[test]
fn several_envelope_problems_are_all_reported() {
    let errors = bad_at(
        json!({"type": "itemRemoval", "transactionId": "a b", "timestamp": "2030-01-01T00:00:00Z"}),
        "/entries/4",
    );
    assert_eq!(
        pc(&errors),
        [
            ("/entries/4/transactionId", codes::FORMAT),
            ("/entries/4/timestamp", codes::FUTURE),
            ("/entries/4/data", codes::REQUIRED),
        ]
    );
}

#[test]
fn timestamps_up_to_five_minutes_ahead_are_accepted() {
    let at = |t: &str| json!({"type": "itemRemoval", "timestamp": t, "data": {"itemId": "A"}});
    ok(at("2026-05-19T12:05:00Z"));
    ok(at("2026-05-19T11:00:00Z"));
    let e = single(at("2026-05-19T12:05:00.001Z"));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/timestamp", codes::FUTURE)
    );
    // A timestamp with an offset is compared in UTC.
    assert_eq!(
        pc(&bad(at("2026-05-19T14:06:00+02:00"))),
        [("/timestamp", codes::FUTURE)]
    );
    // Replays of the stored log do not check the clock.
    let mut errors = Errors::default();
    let replay = parse_entry(
        &at("2030-01-01T00:00:00Z"),
        "",
        ParseOptions::default(),
        &mut errors,
    );
    assert!(replay.is_some() && errors.is_empty());
}

// ---------------------------------------------------------------------------------------
// Removed kinds.

#[test]
fn removed_kinds_name_their_replacement() {
    let e = single(entry(
        "instanceDates",
        json!({"dates": [{"start": "2026-06-01T00:00:00Z"}]}),
    ));
    assert_removed(&e, "/type", "instanceMetadata");
    let e = single(entry(
        "expectedSales",
        json!({"productId": "P", "value": 0.5}),
    ));
    assert_removed(&e, "/type", "expectedSales");
    assert!(e.message.contains("productRegistration") && e.message.contains("productProperties"));
    assert_eq!(
        pc(&bad_at(entry("expectedSales", json!({})), "/entries/7")),
        [("/entries/7/type", codes::REMOVED)]
    );
}

// ---------------------------------------------------------------------------------------
// productRegistration

#[test]
fn product_registration_defaults() {
    let EntryKind::ProductRegistration(r) = kind(entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 100}),
    )) else {
        panic!("a product registration")
    };
    assert_eq!(r.product_id.as_str(), "P");
    assert_eq!(r.props.capacity, Some(100));
    assert_eq!(r.props.pricing_model, PricingModel::default());
    assert_eq!(
        r.props.pricing_model,
        PricingModel::Revenue {
            max_step_change: None
        }
    );
    assert_eq!(r.props.expected_sales, 1.0);
    assert_eq!(r.props.rounding.step, money(0.01));
    assert_eq!(r.props.recalculation, None);
    assert!(r.props.extra.is_empty());
    assert_eq!(r.metadata, None);
    assert!(!r.strict);
}

#[test]
fn product_registration_with_every_field() {
    let EntryKind::ProductRegistration(r) = kind(entry(
        "productRegistration",
        json!({
            "productId": "P-1",
            "capacity": 0,
            "pricingModel": {"type": "tiers", "tiers": [{"upToSoldPercent": 50, "multiplier": 1}, {"multiplier": 1.5}], "maxStepChange": 0.1},
            "expectedSales": 0.75,
            "recalculation": {"soldPercentStep": 5},
            "rounding": {"step": 0.5},
            "metadata": {"zone": "A"},
            "properties": {"custom": {"x": 1}, "capacity": 999},
            "strict": true
        }),
    )) else {
        panic!("a product registration")
    };
    // The typed fields of `data` win over the same keys in `properties`.
    assert_eq!(r.props.capacity, Some(0));
    assert_eq!(
        r.props.pricing_model,
        PricingModel::Tiers {
            tiers: vec![
                Tier {
                    up_to_sold_percent: Some(50.0),
                    multiplier: 1.0
                },
                Tier {
                    up_to_sold_percent: None,
                    multiplier: 1.5
                }
            ],
            max_step_change: Some(0.1)
        }
    );
    assert_eq!(r.props.expected_sales, 0.75);
    assert_eq!(
        r.props.recalculation,
        Some(Recalculation {
            sold_percent_step: 5.0
        })
    );
    assert_eq!(r.props.rounding.step, money(0.5));
    assert_eq!(r.props.extra.get("custom"), Some(&json!({"x": 1})));
    assert_eq!(r.props.extra.len(), 1);
    assert_eq!(r.metadata, json!({"zone": "A"}).as_object().cloned());
    assert!(r.strict);
}

#[test]
fn pricing_models_by_name_and_by_object() {
    let model = |m: Value| match kind(entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 1, "pricingModel": m}),
    )) {
        EntryKind::ProductRegistration(r) => r.props.pricing_model,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        model(json!("fixed")),
        PricingModel::Fixed {
            max_step_change: None
        }
    );
    assert_eq!(model(json!("pace")), PricingModel::pace());
    assert_eq!(model(json!("revenue")), PricingModel::default());
    assert_eq!(
        model(json!({"type": "timeBased", "steps": [{"daysBefore": 30, "multiplier": 0.9}]})),
        PricingModel::TimeBased {
            steps: vec![TimeStep {
                days_before: 30.0,
                multiplier: 0.9
            }],
            max_step_change: None
        }
    );
    let bad_model = |m: Value| {
        pc(&bad(entry(
            "productRegistration",
            json!({"productId": "P", "capacity": 1, "pricingModel": m}),
        )))
        .into_iter()
        .map(|(p, c)| (p.to_owned(), c.to_owned()))
        .collect::<Vec<_>>()
    };
    let at =
        |member: &str, code: &str| vec![(format!("/data/pricingModel{member}"), code.to_owned())];
    assert_eq!(bad_model(json!("surge")), at("", codes::FORMAT));
    assert_eq!(bad_model(json!(3)), at("", codes::TYPE));
    // Each range error at its parameter.
    assert_eq!(
        bad_model(json!({"type": "pace", "sensitivity": -1})),
        at("/sensitivity", codes::RANGE)
    );
    assert_eq!(
        bad_model(json!({"type": "pace", "curve": 0})),
        at("/curve", codes::RANGE)
    );
    assert_eq!(
        bad_model(json!({"type": "fixed", "maxStepChange": 0})),
        at("/maxStepChange", codes::RANGE)
    );
    assert_eq!(
        bad_model(json!({"type": "timeBased", "steps": []})),
        at("/steps", codes::RANGE)
    );
    assert_eq!(
        bad_model(json!({"type": "timeBased", "steps": [{"daysBefore": 1, "multiplier": -0.5}]})),
        at("/steps/0/multiplier", codes::RANGE)
    );
    assert_eq!(
        bad_model(json!({"type": "tiers", "tiers": [{"upToSoldPercent": 120, "multiplier": 1}]})),
        at("/tiers/0/upToSoldPercent", codes::RANGE)
    );
}

#[test]
fn product_registration_errors() {
    let reg = |data: Value| entry("productRegistration", data);
    assert_eq!(
        pc(&bad(reg(json!({"capacity": 1})))),
        [("/data/productId", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(reg(json!({"productId": "P/1", "capacity": 1})))),
        [("/data/productId", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(reg(json!({"productId": "P", "capacity": -1})))),
        [("/data/capacity", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(reg(json!({"productId": "P", "capacity": 1.5})))),
        [("/data/capacity", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(reg(json!({"productId": "P", "capacity": "10"})))),
        [("/data/capacity", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "strict": "yes"})
        ))),
        [("/data/strict", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "metadata": []})
        ))),
        [("/data/metadata", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "recalculation": {"soldPercentStep": 0}})
        ))),
        [("/data/recalculation/soldPercentStep", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "recalculation": {}})
        ))),
        [("/data/recalculation/soldPercentStep", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "rounding": {"step": 0}})
        ))),
        [("/data/rounding/step", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(reg(
            json!({"productId": "P", "capacity": 1, "rounding": {"step": -0.01}})
        ))),
        [("/data/rounding/step", codes::RANGE)]
    );
}

#[test]
fn expected_sales_is_a_fraction_from_0_to_1() {
    let reg = |es: Value| {
        entry(
            "productRegistration",
            json!({"productId": "P", "capacity": 10, "expectedSales": es}),
        )
    };
    for ok_value in [json!(0), json!(0.0), json!(0.5), json!(1), json!(1.0)] {
        ok(reg(ok_value));
    }
    for out in [json!(1.5), json!(-0.1), json!(-3)] {
        let e = single(reg(out.clone()));
        assert_eq!(
            (e.pointer.as_str(), e.code.as_str()),
            ("/data/expectedSales", codes::RANGE),
            "{out}"
        );
    }
    assert_eq!(
        pc(&bad(reg(json!("half")))),
        [("/data/expectedSales", codes::TYPE)]
    );
    // Count-type expected sales are a removed form.
    assert_removed(&single(reg(json!(80))), "/data/expectedSales", "fraction");
    assert_removed(
        &single(reg(json!({"count": 80}))),
        "/data/expectedSales",
        "fraction",
    );
}

#[test]
fn product_schedules_are_removed() {
    let e = single(entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 10, "schedule": {"interval": "PT5M"}}),
    ));
    assert_removed(&e, "/data/schedule", "pricingSchedule");
}

#[test]
fn product_registration_reports_all_problems() {
    let errors = bad_at(
        entry(
            "productRegistration",
            json!({
                "productId": "bad id",
                "capacity": -5,
                "expectedSales": 2.5,
                "schedule": "PT1H",
                "rounding": {"step": 0},
                "strict": 1
            }),
        ),
        "/entries/1",
    );
    let got = sorted(&errors);
    assert_eq!(
        got,
        [
            ("/entries/1/data/capacity", codes::RANGE),
            ("/entries/1/data/expectedSales", codes::RANGE),
            ("/entries/1/data/productId", codes::FORMAT),
            ("/entries/1/data/rounding/step", codes::RANGE),
            ("/entries/1/data/schedule", codes::REMOVED),
            ("/entries/1/data/strict", codes::TYPE),
        ]
    );
}

#[test]
fn capacity_may_be_left_to_legacy_item_quantities() {
    // Legacy clients set capacities up from item quantities (INTERFACE.md, item quantity).
    let EntryKind::ProductRegistration(r) =
        kind(entry("productRegistration", json!({"productId": "P"})))
    else {
        panic!("a product registration")
    };
    assert_eq!(r.props.capacity, None);
}

// ---------------------------------------------------------------------------------------
// itemRegistration

#[test]
fn item_registration_defaults() {
    let EntryKind::ItemRegistration(r) = kind(item_reg(item_data())) else {
        panic!("an item registration")
    };
    assert_eq!((r.item_id.as_str(), r.product_id.as_str()), ("A", "P"));
    assert_eq!(
        r.props.sales_period,
        Period::new(ts("2026-06-01T00:00:00Z"), ts("2026-07-01T00:00:00Z")).expect("period")
    );
    assert_eq!(r.props.dynamic_pricing_period, None);
    assert!(r.props.dynamic_pricing);
    assert_eq!(
        r.props.price_settings,
        PriceSettings {
            min: money(10.0),
            max: money(100.0),
            default: money(50.0),
            multiplier: 1.0
        }
    );
    assert!(r.props.extra.is_empty());
    assert_eq!(r.metadata, None);
    assert_eq!(r.legacy_quantity, None);
    assert!(!r.strict);
}

#[test]
fn item_registration_with_every_field() {
    let data = json!({
        "itemId": "A",
        "productId": "P",
        "salesPeriod": period(),
        "dynamicPricingPeriod": {"start": "2026-06-10T00:00:00Z", "end": "2026-06-20T00:00:00Z"},
        "dynamicPricing": false,
        "priceSettings": {"min": 0, "max": 0.5, "default": 0.25, "multiplier": 1.2},
        "metadata": {"seat": "12A"},
        "properties": {"color": "red"},
        "quantity": 40,
        "strict": true
    });
    let EntryKind::ItemRegistration(r) = kind(item_reg(data)) else {
        panic!("an item registration")
    };
    assert_eq!(
        r.props.dynamic_pricing_period,
        Period::new(ts("2026-06-10T00:00:00Z"), ts("2026-06-20T00:00:00Z"))
    );
    assert!(!r.props.dynamic_pricing);
    assert_eq!(r.props.price_settings.multiplier, 1.2);
    assert_eq!(r.props.price_settings.max, money(0.5));
    assert_eq!(r.props.extra.to_map().get("color"), Some(&json!("red")));
    assert_eq!(
        r.metadata.as_ref().and_then(|m| m.get("seat")),
        Some(&json!("12A"))
    );
    // The deprecated quantity is kept only to set up a missing product capacity.
    assert_eq!(r.legacy_quantity, Some(40));
    assert!(r.strict);
}

#[test]
fn dates_is_an_alias_of_sales_period() {
    let with_dates = set(unset(item_data(), "/salesPeriod"), "/dates", period());
    let EntryKind::ItemRegistration(a) = kind(item_reg(with_dates)) else {
        panic!("an item registration")
    };
    let EntryKind::ItemRegistration(b) = kind(item_reg(item_data())) else {
        panic!("an item registration")
    };
    assert_eq!(a, b);
    // The properties document speaks of salesPeriod only.
    let doc = serde_json::to_value(&a.props).expect("serializable");
    assert!(doc.get("salesPeriod").is_some() && doc.get("dates").is_none());
    // Errors in the alias point at the alias.
    let bad_dates = set(
        unset(item_data(), "/salesPeriod"),
        "/dates",
        json!({"start": "2026-07-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"}),
    );
    assert_eq!(
        pc(&bad(item_reg(bad_dates))),
        [("/data/dates/end", codes::RANGE)]
    );
    // salesPeriod wins when both are given.
    let both = set(
        item_data(),
        "/dates",
        json!({"start": "2020-01-01T00:00:00Z", "end": "2020-02-01T00:00:00Z"}),
    );
    let EntryKind::ItemRegistration(c) = kind(item_reg(both)) else {
        panic!("an item registration")
    };
    assert_eq!(c.props.sales_period, b.props.sales_period);
    assert!(c.props.extra.is_empty());
}

#[test]
fn dates_in_item_property_changes_means_sales_period() {
    let change = |data: Value| match kind(entry("itemProperties", data)) {
        EntryKind::ItemProperties { change, .. } => change,
        other => panic!("item properties, not {other:?}"),
    };
    let DocChange::Patch(p) = change(json!({"itemId": "A", "patch": [
        {"op": "replace", "path": "/dates/end", "value": "2026-08-01T00:00:00Z"},
        {"op": "copy", "from": "/dates", "path": "/dynamicPricingPeriod"},
        {"op": "add", "path": "/datesOfMine", "value": 1}
    ]})) else {
        panic!("a patch")
    };
    let paths = serde_json::to_value(&p).expect("a patch");
    assert_eq!(paths[0]["path"], "/salesPeriod/end");
    assert_eq!(paths[1]["from"], "/salesPeriod");
    assert_eq!(paths[2]["path"], "/datesOfMine");
    let DocChange::Update(u) = change(json!({"itemId": "A", "update": {"dates": period()}})) else {
        panic!("an update")
    };
    assert_eq!(u.get("salesPeriod"), Some(&period()));
    assert!(!u.contains_key("dates"));
    // Item metadata is the client's: its `dates` stays `dates`.
    let EntryKind::ItemMetadata { change, .. } = kind(entry(
        "itemMetadata",
        json!({"itemId": "A", "update": {"dates": 1}}),
    )) else {
        panic!("item metadata")
    };
    assert_eq!(
        change,
        DocChange::Update(json!({"dates": 1}).as_object().cloned().unwrap_or_default())
    );
}

#[test]
fn item_registration_required_fields() {
    let e = single(item_reg(unset(item_data(), "/salesPeriod")));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/salesPeriod", codes::REQUIRED)
    );
    assert!(e.message.contains("dates"), "{}", e.message);
    assert_eq!(
        pc(&bad(item_reg(unset(item_data(), "/priceSettings")))),
        [("/data/priceSettings", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(item_reg(unset(item_data(), "/productId")))),
        [("/data/productId", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(item_reg(unset(item_data(), "/itemId")))),
        [("/data/itemId", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(item_reg(unset(item_data(), "/priceSettings/default")))),
        [("/data/priceSettings/default", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(item_reg(set(item_data(), "/priceSettings", json!(5))))),
        [("/data/priceSettings", codes::TYPE)]
    );
}

#[test]
fn item_registration_field_errors() {
    let cases = [
        (
            "/itemId",
            json!("a".repeat(129)),
            "/data/itemId",
            codes::FORMAT,
        ),
        ("/itemId", json!("é"), "/data/itemId", codes::FORMAT),
        (
            "/salesPeriod",
            json!({"start": "2026-06-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"}),
            "/data/salesPeriod/end",
            codes::RANGE,
        ),
        (
            "/salesPeriod",
            json!({"start": "June", "end": "2026-06-01T00:00:00Z"}),
            "/data/salesPeriod/start",
            codes::FORMAT,
        ),
        (
            "/salesPeriod",
            json!({"end": "2026-06-01T00:00:00Z"}),
            "/data/salesPeriod/start",
            codes::REQUIRED,
        ),
        (
            "/dynamicPricingPeriod",
            json!("always"),
            "/data/dynamicPricingPeriod",
            codes::TYPE,
        ),
        (
            "/dynamicPricing",
            json!("on"),
            "/data/dynamicPricing",
            codes::TYPE,
        ),
        ("/quantity", json!(-1), "/data/quantity", codes::RANGE),
        (
            "/priceSettings/min",
            json!(0.0000001),
            "/data/priceSettings/min",
            codes::FORMAT,
        ),
        (
            "/priceSettings/multiplier",
            json!("x2"),
            "/data/priceSettings/multiplier",
            codes::TYPE,
        ),
    ];
    for (at, value, pointer, code) in cases {
        let errors = bad(item_reg(set(item_data(), at, value.clone())));
        assert_eq!(pc(&errors), [(pointer, code)], "{at} = {value}");
    }
}

#[test]
fn negative_prices_and_multipliers_are_refused_with_exact_pointers() {
    for field in ["min", "max", "default", "multiplier"] {
        let data = set(item_data(), &format!("/priceSettings/{field}"), json!(-1));
        let errors = bad_at(item_reg(data), "/entries/3");
        assert!(
            errors.iter().any(
                |e| e.pointer == format!("/entries/3/data/priceSettings/{field}")
                    && e.code == codes::RANGE
            ),
            "{field}: {errors:#?}"
        );
    }
    let e = single(item_reg(set(
        item_data(),
        "/priceSettings/min",
        json!(-0.01),
    )));
    assert_eq!(e.pointer, "/data/priceSettings/min");
    assert_eq!(e.message, "must not be negative");
    // All three negative prices and the multiplier are reported together.
    let data = set(
        item_data(),
        "/priceSettings",
        json!({"min": -1, "max": -2, "default": -3, "multiplier": -0.5}),
    );
    assert_eq!(
        pc(&bad_at(item_reg(data), "/entries/3")),
        [
            ("/entries/3/data/priceSettings/min", codes::RANGE),
            ("/entries/3/data/priceSettings/max", codes::RANGE),
            ("/entries/3/data/priceSettings/default", codes::RANGE),
            ("/entries/3/data/priceSettings/multiplier", codes::RANGE),
        ]
    );
    // Zero is a price.
    ok(item_reg(set(
        item_data(),
        "/priceSettings",
        json!({"min": 0, "max": 0, "default": 0, "multiplier": 0}),
    )));
}

#[test]
fn price_bounds_must_be_ordered() {
    let ps = |v: Value| item_reg(set(item_data(), "/priceSettings", v));
    assert_eq!(
        pc(&bad(ps(json!({"min": 60, "max": 50, "default": 55})))),
        [("/data/priceSettings/max", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(ps(json!({"min": 10, "max": 50, "default": 55})))),
        [("/data/priceSettings/default", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(ps(json!({"min": 10, "max": 50, "default": 5})))),
        [("/data/priceSettings/default", codes::RANGE)]
    );
    // min = max is how a constant price is expressed now.
    ok(ps(json!({"min": 25, "max": 25, "default": 25})));
}

#[test]
fn constant_price_and_item_expected_sales_are_removed() {
    let e = single(item_reg(set(
        item_data(),
        "/priceSettings/constantPrice",
        json!(30),
    )));
    assert_removed(&e, "/data/priceSettings/constantPrice", "min and max");
    let e = single(item_reg(set(item_data(), "/expectedSales", json!(0.5))));
    assert_removed(&e, "/data/expectedSales", "product");
    // Given as null they are still removed fields, not silently accepted.
    let e = single(item_reg(set(
        item_data(),
        "/priceSettings/constantPrice",
        Value::Null,
    )));
    assert_eq!(e.code, codes::REMOVED);
}

#[test]
fn errors_inside_registration_properties_point_into_properties() {
    // Known fields may also arrive inside `properties`; their errors must point there.
    let data = set(
        unset(item_data(), "/priceSettings"),
        "/properties",
        json!({"priceSettings": {"min": -1, "max": 10, "default": 5}}),
    );
    assert_eq!(
        pc(&bad_at(item_reg(data), "/entries/0")),
        [("/entries/0/data/properties/priceSettings/min", codes::RANGE)]
    );
    let data = set(
        item_data(),
        "/properties",
        json!({"expectedSales": 0.4, "color": "red"}),
    );
    assert_eq!(
        pc(&bad(item_reg(data))),
        [("/data/properties/expectedSales", codes::REMOVED)]
    );
    let errors = bad(entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 1, "properties": {"expectedSales": 3, "schedule": {}}}),
    ));
    let got = sorted(&errors);
    assert_eq!(
        got,
        [
            ("/data/properties/expectedSales", codes::REMOVED),
            ("/data/properties/schedule", codes::REMOVED),
        ]
    );
    // The deprecated quantity inside properties is accepted (INTERFACE.md: ignored since
    // 3.0.0); where `data` has none it is the legacy quantity, checked where it was written.
    let data = set(
        item_data(),
        "/properties",
        json!({"quantity": 5, "color": "red"}),
    );
    let EntryKind::ItemRegistration(r) = kind(item_reg(data.clone())) else {
        panic!("an item registration")
    };
    assert_eq!(r.legacy_quantity, Some(5));
    assert!(!r.props.extra.to_map().contains_key("quantity"));
    let EntryKind::ItemRegistration(r) = kind(item_reg(set(data, "/quantity", json!(7)))) else {
        panic!("an item registration")
    };
    assert_eq!(r.legacy_quantity, Some(7));
    let data = set(item_data(), "/properties", json!({"quantity": -5}));
    assert_eq!(
        pc(&bad(item_reg(data))),
        [("/data/properties/quantity", codes::RANGE)]
    );
    // A null in `data` does not override `properties`.
    let data = set(
        set(item_data(), "/properties", json!({"dynamicPricing": "yes"})),
        "/dynamicPricing",
        Value::Null,
    );
    assert_eq!(
        pc(&bad(item_reg(data))),
        [("/data/properties/dynamicPricing", codes::TYPE)]
    );
    // A field given in `data` overrides `properties`, and its errors point at `data`.
    let errors = bad(entry(
        "productRegistration",
        json!({"productId": "P", "capacity": -1, "properties": {"capacity": 5}}),
    ));
    assert_eq!(pc(&errors), [("/data/capacity", codes::RANGE)]);
}

#[test]
fn item_registration_reports_all_problems() {
    let data = json!({
        "itemId": "A B",
        "productId": "",
        "dates": {"start": "2026-07-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"},
        "priceSettings": {"min": -1, "max": 10, "default": 5, "constantPrice": 5},
        "expectedSales": 10,
        "quantity": -3
    });
    let errors = bad_at(item_reg(data), "/entries/9");
    let got = sorted(&errors);
    assert_eq!(
        got,
        [
            ("/entries/9/data/dates/end", codes::RANGE),
            ("/entries/9/data/expectedSales", codes::REMOVED),
            ("/entries/9/data/itemId", codes::FORMAT),
            (
                "/entries/9/data/priceSettings/constantPrice",
                codes::REMOVED
            ),
            ("/entries/9/data/priceSettings/min", codes::RANGE),
            ("/entries/9/data/productId", codes::FORMAT),
            ("/entries/9/data/quantity", codes::RANGE),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// itemRemoval

#[test]
fn item_removal() {
    assert_eq!(
        kind(entry("itemRemoval", json!({"itemId": "A"}))),
        EntryKind::ItemRemoval {
            item_id: ItemId::parse("A").expect("valid")
        }
    );
    assert_eq!(
        pc(&bad(entry("itemRemoval", json!({})))),
        [("/data/itemId", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(entry("itemRemoval", json!({"itemId": 5})))),
        [("/data/itemId", codes::TYPE)]
    );
}

// ---------------------------------------------------------------------------------------
// Document changes: instanceMetadata, itemMetadata, itemProperties, productMetadata,
// productProperties.

fn patch_of(k: EntryKind) -> Vec<json_patch::PatchOperation> {
    let change = match k {
        EntryKind::InstanceMetadata(c) => c,
        EntryKind::ItemMetadata { change, .. }
        | EntryKind::ItemProperties { change, .. }
        | EntryKind::ProductMetadata { change, .. }
        | EntryKind::ProductProperties { change, .. } => change,
        other => panic!("not a document change: {other:?}"),
    };
    match change {
        DocChange::Patch(p) => p.0,
        DocChange::Update(u) => panic!("an update, not a patch: {u:?}"),
    }
}

#[test]
fn every_document_kind_takes_a_patch() {
    let patch = json!([
        {"op": "add", "path": "/note", "value": "x"},
        {"op": "test", "path": "/note", "value": "x"},
        {"op": "remove", "path": "/note"}
    ]);
    let cases = [
        ("instanceMetadata", json!({})),
        ("itemMetadata", json!({"itemId": "A"})),
        ("itemProperties", json!({"itemId": "A"})),
        ("productMetadata", json!({"productId": "P"})),
        ("productProperties", json!({"productId": "P"})),
    ];
    for (type_name, ids) in cases {
        let data = set(ids, "/patch", patch.clone());
        let k = kind(entry(type_name, data));
        assert_eq!(k.type_name(), type_name);
        match &k {
            EntryKind::ItemMetadata { item_id, .. } | EntryKind::ItemProperties { item_id, .. } => {
                assert_eq!(item_id.as_str(), "A")
            }
            EntryKind::ProductMetadata { product_id, .. }
            | EntryKind::ProductProperties { product_id, .. } => {
                assert_eq!(product_id.as_str(), "P")
            }
            _ => {}
        }
        assert_eq!(patch_of(k).len(), 3, "{type_name}");
    }
}

#[test]
fn every_document_kind_still_takes_the_deprecated_update() {
    let cases = [
        ("instanceMetadata", json!({})),
        ("itemMetadata", json!({"itemId": "A"})),
        ("itemProperties", json!({"itemId": "A"})),
        ("productMetadata", json!({"productId": "P"})),
        ("productProperties", json!({"productId": "P"})),
    ];
    for (type_name, ids) in cases {
        let data = set(ids, "/update", json!({"note": "x", "gone": null}));
        let change = match kind(entry(type_name, data)) {
            EntryKind::InstanceMetadata(c) => c,
            EntryKind::ItemMetadata { change, .. }
            | EntryKind::ItemProperties { change, .. }
            | EntryKind::ProductMetadata { change, .. }
            | EntryKind::ProductProperties { change, .. } => change,
            other => panic!("{other:?}"),
        };
        let DocChange::Update(map) = &change else {
            panic!("an update: {change:?}")
        };
        assert_eq!(map.get("note"), Some(&json!("x")));
        // The update is a shallow merge at the root; null removes a key.
        let mut doc = json!({"gone": 1, "kept": {"a": 1}});
        change.apply_to(&mut doc).expect("applies");
        assert_eq!(doc, json!({"note": "x", "kept": {"a": 1}}));
    }
}

#[test]
fn document_change_shape_errors() {
    assert_eq!(
        pc(&bad(entry("instanceMetadata", json!({})))),
        [("/data/patch", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(entry(
            "instanceMetadata",
            json!({"patch": [], "update": {}})
        ))),
        [("/data/update", codes::CONFLICT)]
    );
    assert_eq!(
        pc(&bad(entry(
            "instanceMetadata",
            json!({"patch": {"op": "add"}})
        ))),
        [("/data/patch", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(entry(
            "instanceMetadata",
            json!({"patch": [{"op": "frobnicate", "path": "/x"}]})
        ))),
        [("/data/patch", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(entry(
            "instanceMetadata",
            json!({"patch": [{"op": "add", "path": "x", "value": 1}]})
        ))),
        [("/data/patch", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(entry("itemMetadata", json!({"update": [1]})))),
        [
            ("/data/itemId", codes::REQUIRED),
            ("/data/update", codes::TYPE)
        ]
    );
    assert_eq!(
        pc(&bad(entry(
            "productProperties",
            json!({"productId": "P Q", "patch": []})
        ))),
        [("/data/productId", codes::FORMAT)]
    );
    assert_eq!(
        pc(&bad(entry("productMetadata", json!({"patch": []})))),
        [("/data/productId", codes::REQUIRED)]
    );
    // An empty patch is a valid (if pointless) patch.
    assert!(patch_of(kind(entry("instanceMetadata", json!({"patch": []})))).is_empty());
}

fn date(tags: Value) -> Value {
    json!({"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T23:00:00Z"}, "description": "Show", "tags": tags})
}

#[test]
fn instance_dates_accept_main_only() {
    let meta = |patch: Value| entry("instanceMetadata", json!({ "patch": patch }));
    ok(meta(
        json!([{"op": "add", "path": "/dates", "value": [date(json!(["main", "main"])), date(json!([]))]}]),
    ));
    ok(meta(
        json!([{"op": "add", "path": "/dates/0/tags/-", "value": "main"}]),
    ));
    // Tags other than main anywhere in a patch value.
    let cases = [
        (
            json!([{"op": "add", "path": "/dates", "value": [date(json!(["main"])), date(json!(["main", "vip"]))]}]),
            "/data/patch/0/value/1/tags/1",
        ),
        (
            json!([{"op": "add", "path": "/dates/-", "value": date(json!(["premiere"]))}]),
            "/data/patch/0/value/tags/0",
        ),
        (
            json!([{"op": "replace", "path": "/dates/0/tags", "value": ["main", "Main"]}]),
            "/data/patch/0/value/1",
        ),
        (
            json!([{"op": "add", "path": "/dates/2/tags/0", "value": "matinee"}]),
            "/data/patch/0/value",
        ),
        (
            json!([{"op": "replace", "path": "", "value": {"dates": [date(json!(["x"]))]}}]),
            "/data/patch/0/value/dates/0/tags/0",
        ),
        (
            json!([{"op": "test", "path": "/a", "value": 1}, {"op": "add", "path": "/dates/-", "value": date(json!([1]))}]),
            "/data/patch/1/value/tags/0",
        ),
    ];
    for (patch, pointer) in cases {
        let errors = bad(meta(patch.clone()));
        assert_eq!(pc(&errors), [(pointer, "unknownTag")], "{patch}");
        assert!(errors[0].message.contains("main"));
    }
    // The deprecated update is checked too.
    assert_eq!(
        pc(&bad_at(
            entry(
                "instanceMetadata",
                json!({"update": {"dates": [date(json!(["vip"]))]}})
            ),
            "/entries/5"
        )),
        [("/entries/5/data/update/dates/0/tags/0", "unknownTag")]
    );
    // null in the deprecated update removes the key; nothing to check.
    ok(entry(
        "instanceMetadata",
        json!({"update": {"dates": null, "location": null}}),
    ));
    // The document stays an object.
    assert_eq!(
        pc(&bad(meta(
            json!([{"op": "replace", "path": "", "value": [1]}])
        ))),
        [("/data/patch/0/value", codes::TYPE)]
    );
    // Several bad tags in one entry are all reported.
    let errors = bad(meta(json!([
        {"op": "add", "path": "/dates/-", "value": date(json!(["a", "main", "b"]))},
        {"op": "add", "path": "/dates/0/tags/-", "value": "c"}
    ])));
    assert_eq!(
        pc(&errors),
        [
            ("/data/patch/0/value/tags/0", "unknownTag"),
            ("/data/patch/0/value/tags/2", "unknownTag"),
            ("/data/patch/1/value", "unknownTag"),
        ]
    );
}

#[test]
fn instance_metadata_values_are_checked_where_decidable() {
    let meta = |patch: Value| entry("instanceMetadata", json!({ "patch": patch }));
    assert_eq!(
        pc(&bad(meta(
            json!([{"op": "add", "path": "/dates/-", "value": {"description": "no date"}}])
        ))),
        [("/data/patch/0/value/date", codes::REQUIRED)]
    );
    assert_eq!(
        pc(&bad(meta(
            json!([{"op": "add", "path": "/dates/-", "value": {"date": {"start": "2026-06-02T00:00:00Z", "end": "2026-06-01T00:00:00Z"}}}])
        ))),
        [("/data/patch/0/value/date/end", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(meta(
            json!([{"op": "add", "path": "/dates", "value": {"not": "a list"}}])
        ))),
        [("/data/patch/0/value", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(meta(
            json!([{"op": "add", "path": "/location", "value": {"coord": {"lat": 91, "lon": 0}}}])
        ))),
        [("/data/patch/0/value/coord/lat", codes::RANGE)]
    );
    // A single point in time is a valid date; other paths are free.
    ok(meta(json!([
        {"op": "add", "path": "/dates/-", "value": {"date": {"start": "2026-06-01T00:00:00Z", "end": "2026-06-01T00:00:00Z"}}},
        {"op": "add", "path": "/location", "value": {"name": "Arena", "coord": {"lat": 52.5, "lon": 13.4}}},
        {"op": "add", "path": "/anything", "value": {"tags": ["free"]}}
    ])));
    // Removing needs no value check.
    ok(meta(json!([{"op": "remove", "path": "/dates/0/tags/0"}])));
}

#[test]
fn item_properties_patches_are_checked() {
    let props = |patch: Value| entry("itemProperties", json!({"itemId": "A", "patch": patch}));
    ok(props(json!([
        {"op": "replace", "path": "/priceSettings/min", "value": 5},
        {"op": "add", "path": "/color", "value": "red"},
        {"op": "replace", "path": "/dynamicPricing", "value": false}
    ])));
    for field in ["min", "max", "default", "multiplier"] {
        let errors = bad_at(
            props(json!([
                {"op": "test", "path": "/dynamicPricing", "value": true},
                {"op": "replace", "path": format!("/priceSettings/{field}"), "value": -2}
            ])),
            "/entries/3",
        );
        assert_eq!(
            pc(&errors),
            [("/entries/3/data/patch/1/value", codes::RANGE)],
            "{field}"
        );
    }
    assert_removed(
        &single(props(
            json!([{"op": "add", "path": "/priceSettings/constantPrice", "value": 9}]),
        )),
        "/data/patch/0/value",
        "min and max",
    );
    assert_removed(
        &single(props(
            json!([{"op": "add", "path": "/expectedSales", "value": 0.3}]),
        )),
        "/data/patch/0/value",
        "product",
    );
    // Fragments of the document are checked inside.
    assert_eq!(
        pc(&bad(props(json!([
            {"op": "replace", "path": "/priceSettings", "value": {"min": -1, "max": 5, "default": 3, "constantPrice": 3}}
        ])))),
        [
            ("/data/patch/0/value/constantPrice", codes::REMOVED),
            ("/data/patch/0/value/min", codes::RANGE),
        ]
    );
    assert_eq!(
        pc(&bad(props(json!([
            {"op": "replace", "path": "", "value": {"expectedSales": 1, "priceSettings": {"multiplier": -1}}}
        ])))),
        [
            ("/data/patch/0/value/expectedSales", codes::REMOVED),
            ("/data/patch/0/value/priceSettings/multiplier", codes::RANGE),
        ]
    );
    // The deprecated update is checked at its keys.
    assert_eq!(
        sorted(&bad(entry(
            "itemProperties",
            json!({"itemId": "A", "update": {"priceSettings": {"min": 1, "max": -1, "default": 1}, "expectedSales": 0.5}})
        ))),
        [
            ("/data/update/expectedSales", codes::REMOVED),
            ("/data/update/priceSettings/max", codes::RANGE),
        ]
    );
}

#[test]
fn product_properties_patches_are_checked() {
    let props = |patch: Value| {
        entry(
            "productProperties",
            json!({"productId": "P", "patch": patch}),
        )
    };
    ok(props(json!([
        {"op": "replace", "path": "/expectedSales", "value": 0.8},
        {"op": "add", "path": "/recalculation", "value": {"soldPercentStep": 5}},
        {"op": "replace", "path": "/capacity", "value": 50}
    ])));
    assert_eq!(
        pc(&bad(props(
            json!([{"op": "replace", "path": "/expectedSales", "value": 1.01}])
        ))),
        [("/data/patch/0/value", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(props(
            json!([{"op": "replace", "path": "/expectedSales", "value": -0.2}])
        ))),
        [("/data/patch/0/value", codes::RANGE)]
    );
    assert_removed(
        &single(props(
            json!([{"op": "replace", "path": "/expectedSales", "value": 250}]),
        )),
        "/data/patch/0/value",
        "fraction",
    );
    // The capacity follows the registration's rule at submission (null unsets it).
    ok(props(
        json!([{"op": "replace", "path": "/capacity", "value": null}]),
    ));
    ok(entry(
        "productProperties",
        json!({"productId": "P", "update": {"capacity": 7.0}}),
    ));
    assert_eq!(
        pc(&bad(props(
            json!([{"op": "replace", "path": "/capacity", "value": -3}])
        ))),
        [("/data/patch/0/value", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(props(
            json!([{"op": "add", "path": "/capacity", "value": "10"}])
        ))),
        [("/data/patch/0/value", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(entry(
            "productProperties",
            json!({"productId": "P", "update": {"capacity": -3}}),
        ))),
        [("/data/update/capacity", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(props(
            json!([{"op": "replace", "path": "", "value": {"capacity": 2.5}}])
        ))),
        [("/data/patch/0/value/capacity", codes::RANGE)]
    );
    assert_removed(
        &single(props(
            json!([{"op": "add", "path": "/schedule", "value": {"interval": "PT5M"}}]),
        )),
        "/data/patch/0/value",
        "pricingSchedule",
    );
    assert_removed(
        &single(entry(
            "productProperties",
            json!({"productId": "P", "update": {"expectedSales": 12}}),
        )),
        "/data/update/expectedSales",
        "fraction",
    );
    assert_removed(
        &single(entry(
            "productProperties",
            json!({"productId": "P", "update": {"schedule": null}}),
        )),
        "/data/update/schedule",
        "pricingSchedule",
    );
    // The whole document replaced is checked at its fields.
    assert_eq!(
        pc(&bad(props(json!([
            {"op": "replace", "path": "", "value": {"capacity": 10, "expectedSales": 1.5, "schedule": {}}}
        ])))),
        [
            ("/data/patch/0/value/schedule", codes::REMOVED),
            ("/data/patch/0/value/expectedSales", codes::RANGE),
        ]
    );
    ok(props(json!([
        {"op": "replace", "path": "", "value": {"capacity": 10, "expectedSales": 0.5}}
    ])));
    // Both problems of one entry are reported.
    assert_eq!(
        pc(&bad_at(
            props(json!([
                {"op": "add", "path": "/schedule", "value": {}},
                {"op": "remove", "path": "/capacity"},
                {"op": "add", "path": "/expectedSales", "value": 7.5}
            ])),
            "/entries/2"
        )),
        [
            ("/entries/2/data/patch/0/value", codes::REMOVED),
            ("/entries/2/data/patch/2/value", codes::RANGE),
        ]
    );
}

#[test]
fn metadata_documents_are_free_form() {
    ok(entry(
        "itemMetadata",
        json!({"itemId": "A", "patch": [{"op": "add", "path": "/tags", "value": ["vip"]}, {"op": "add", "path": "/priceSettings", "value": {"min": -1}}]}),
    ));
    ok(entry(
        "productMetadata",
        json!({"productId": "P", "update": {"zone": "North", "expectedSales": 99}}),
    ));
}

// ---------------------------------------------------------------------------------------
// itemSale

fn sale(data: Value) -> Value {
    entry("itemSale", data)
}

fn sale_of(k: EntryKind) -> ItemSale {
    match k {
        EntryKind::ItemSale(s) => s,
        other => panic!("not a sale: {other:?}"),
    }
}

#[test]
fn item_sale_defaults() {
    let s = sale_of(kind(sale(json!({"itemId": "A", "price": 19.99}))));
    assert_eq!(
        s,
        ItemSale {
            item_id: ItemId::parse("A").expect("valid"),
            quantity: 1,
            price: money(19.99),
            base_price: None,
            pool: false,
            currency: None,
            tax: None,
            breakdown: vec![],
            sold_at: None,
        }
    );
}

#[test]
fn item_sale_with_every_field() {
    let s = sale_of(kind(sale(json!({
        "itemId": "A",
        "quantity": 3,
        "price": 120.5,
        "basePrice": 100,
        "pool": true,
        "currency": "EUR",
        "tax": {"vatPercent": 19, "amount": 19.24, "included": true},
        "breakdown": [
            {"component": "base", "amount": 100},
            {"component": "fee", "amount": 2.5},
            {"component": "discount", "amount": -1.25}
        ],
        "soldAt": "2026-05-19T11:59:00Z"
    }))));
    assert_eq!(s.quantity, 3);
    assert_eq!(s.price, money(120.5));
    assert_eq!(s.base_price, Some(money(100.0)));
    assert!(s.pool);
    assert_eq!(s.currency.as_deref(), Some("EUR"));
    assert_eq!(
        s.tax,
        Some(Tax {
            vat_percent: Some(19.0),
            amount: Some(money(19.24)),
            included: Some(true)
        })
    );
    assert_eq!(
        s.breakdown,
        vec![
            BreakdownLine {
                component: "base".into(),
                amount: money(100.0)
            },
            BreakdownLine {
                component: "fee".into(),
                amount: money(2.5)
            },
            BreakdownLine {
                component: "discount".into(),
                amount: money(-1.25)
            },
        ]
    );
    assert_eq!(s.sold_at, Some(ts("2026-05-19T11:59:00Z")));
    // An empty tax object is allowed.
    let s = sale_of(kind(sale(json!({"itemId": "A", "price": 1, "tax": {}}))));
    assert_eq!(
        s.tax,
        Some(Tax {
            vat_percent: None,
            amount: None,
            included: None
        })
    );
}

#[test]
fn a_negative_quantity_is_a_return() {
    let s = sale_of(kind(sale(
        json!({"itemId": "A", "price": 10, "quantity": -2}),
    )));
    assert_eq!(s.quantity, -2);
    let e = single(sale(json!({"itemId": "A", "price": 10, "quantity": 0})));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/quantity", codes::RANGE)
    );
    assert_eq!(
        pc(&bad(sale(
            json!({"itemId": "A", "price": 10, "quantity": 1.5})
        ))),
        [("/data/quantity", codes::TYPE)]
    );
    assert_eq!(
        pc(&bad(sale(
            json!({"itemId": "A", "price": 10, "quantity": "2"})
        ))),
        [("/data/quantity", codes::TYPE)]
    );
    // A whole number written with a decimal point or an exponent is an integer (JSON
    // Schema's rule), up to 2^53.
    for (quantity, expected) in [(json!(2.0), 2), (json!(-3.0), -3), (json!(1e2), 100)] {
        let s = sale_of(kind(sale(
            json!({"itemId": "A", "price": 10, "quantity": quantity}),
        )));
        assert_eq!(s.quantity, expected);
    }
    // Past 2^53 - 1 units (the bound of every count), also as a decimal.
    for quantity in [
        json!(1e19),
        json!(-1e19),
        json!(1u64 << 53),
        json!(u64::MAX),
    ] {
        assert_eq!(
            pc(&bad(sale(
                json!({"itemId": "A", "price": 10, "quantity": quantity})
            ))),
            [("/data/quantity", codes::RANGE)],
            "{quantity}"
        );
    }
    let registration = |capacity: Value| {
        entry(
            "productRegistration",
            json!({"productId": "P", "capacity": capacity}),
        )
    };
    let _ = ok(registration(json!(10.0)));
    assert_eq!(
        pc(&bad(registration(json!(-1.0)))),
        [("/data/capacity", codes::RANGE)]
    );
    assert_eq!(
        pc(&bad(registration(json!(2.5)))),
        [("/data/capacity", codes::RANGE)]
    );
}

#[test]
fn item_sale_field_errors() {
    let base = json!({"itemId": "A", "price": 10});
    let cases = [
        ("/price", json!(-0.01), "/data/price", codes::RANGE),
        ("/price", json!("10"), "/data/price", codes::TYPE),
        ("/price", json!(1.0000001), "/data/price", codes::FORMAT),
        ("/basePrice", json!(-5), "/data/basePrice", codes::RANGE),
        ("/pool", json!(1), "/data/pool", codes::TYPE),
        ("/currency", json!("eur"), "/data/currency", codes::FORMAT),
        ("/currency", json!("EURO"), "/data/currency", codes::FORMAT),
        ("/currency", json!(978), "/data/currency", codes::TYPE),
        ("/tax", json!(19), "/data/tax", codes::TYPE),
        (
            "/tax",
            json!({"vatPercent": 101}),
            "/data/tax/vatPercent",
            codes::RANGE,
        ),
        (
            "/tax",
            json!({"vatPercent": -1}),
            "/data/tax/vatPercent",
            codes::RANGE,
        ),
        (
            "/tax",
            json!({"amount": -1}),
            "/data/tax/amount",
            codes::RANGE,
        ),
        (
            "/tax",
            json!({"included": "yes"}),
            "/data/tax/included",
            codes::TYPE,
        ),
        ("/breakdown", json!({}), "/data/breakdown", codes::TYPE),
        ("/breakdown", json!([5]), "/data/breakdown/0", codes::TYPE),
        (
            "/breakdown",
            json!([{"component": "a", "amount": 1}, {"amount": 1}]),
            "/data/breakdown/1/component",
            codes::REQUIRED,
        ),
        (
            "/breakdown",
            json!([{"component": "", "amount": 1}]),
            "/data/breakdown/0/component",
            codes::FORMAT,
        ),
        (
            "/breakdown",
            json!([{"component": "a"}]),
            "/data/breakdown/0/amount",
            codes::REQUIRED,
        ),
        (
            "/breakdown",
            json!([{"component": "a", "amount": 0.1234567}]),
            "/data/breakdown/0/amount",
            codes::FORMAT,
        ),
        ("/soldAt", json!("today"), "/data/soldAt", codes::FORMAT),
        ("/itemId", json!(""), "/data/itemId", codes::FORMAT),
    ];
    for (at, value, pointer, code) in cases {
        let errors = bad_at(sale(set(base.clone(), at, value.clone())), "");
        assert_eq!(pc(&errors), [(pointer, code)], "{at} = {value}");
    }
    assert_eq!(
        pc(&bad(sale(json!({"itemId": "A"})))),
        [("/data/price", codes::REQUIRED)]
    );
    let lines: Vec<Value> = (0..101)
        .map(|i| json!({"component": format!("c{i}"), "amount": 1}))
        .collect();
    assert_eq!(
        pc(&bad(sale(set(base.clone(), "/breakdown", json!(lines))))),
        [("/data/breakdown", codes::TOO_LARGE)]
    );
    // Tax on a 3.0.0 sale may be given with the 3.1.0 breakdown.
    let lines: Vec<Value> = (0..100)
        .map(|i| json!({"component": format!("c{i}"), "amount": 0.1}))
        .collect();
    assert_eq!(
        sale_of(kind(sale(set(base, "/breakdown", json!(lines)))))
            .breakdown
            .len(),
        100
    );
}

#[test]
fn item_sale_reports_all_problems() {
    let errors = bad_at(
        sale(json!({
            "quantity": 0,
            "price": -1,
            "basePrice": "x",
            "currency": "€",
            "tax": {"vatPercent": 200, "amount": -3},
            "breakdown": [{"component": 7, "amount": 1}, {"component": "ok"}],
            "soldAt": 5
        })),
        "/entries/12",
    );
    let got = sorted(&errors);
    assert_eq!(
        got,
        [
            ("/entries/12/data/basePrice", codes::TYPE),
            ("/entries/12/data/breakdown/0/component", codes::TYPE),
            ("/entries/12/data/breakdown/1/amount", codes::REQUIRED),
            ("/entries/12/data/currency", codes::FORMAT),
            ("/entries/12/data/itemId", codes::REQUIRED),
            ("/entries/12/data/price", codes::RANGE),
            ("/entries/12/data/quantity", codes::RANGE),
            ("/entries/12/data/soldAt", codes::TYPE),
            ("/entries/12/data/tax/amount", codes::RANGE),
            ("/entries/12/data/tax/vatPercent", codes::RANGE),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// itemQuantity

#[test]
fn item_quantity_total_and_change_absolute() {
    let q = |data: Value| kind(entry("itemQuantity", data));
    let expected = EntryKind::ItemQuantity {
        item_id: ItemId::parse("A").expect("valid"),
        total: 40,
    };
    assert_eq!(q(json!({"itemId": "A", "total": 40})), expected);
    assert_eq!(
        q(json!({"itemId": "A", "change": {"absolute": 40}})),
        expected
    );
    assert_eq!(
        q(json!({"itemId": "A", "total": 0})),
        EntryKind::ItemQuantity {
            item_id: ItemId::parse("A").expect("valid"),
            total: 0
        }
    );
}

#[test]
fn change_relative_is_removed() {
    let e = single(entry(
        "itemQuantity",
        json!({"itemId": "A", "change": {"relative": -2}}),
    ));
    assert_removed(&e, "/data/change/relative", "total");
    // With an absolute beside it, the removed field is still refused.
    assert_eq!(
        pc(&bad(entry(
            "itemQuantity",
            json!({"itemId": "A", "change": {"relative": 1, "absolute": 4}})
        ))),
        [("/data/change/relative", codes::REMOVED)]
    );
}

#[test]
fn item_quantity_errors() {
    let q = |data: Value| owned(&bad(entry("itemQuantity", data)));
    assert_eq!(
        q(json!({"itemId": "A"})),
        one("/data/total", codes::REQUIRED)
    );
    assert_eq!(
        q(json!({"itemId": "A", "total": -1})),
        one("/data/total", codes::RANGE)
    );
    assert_eq!(
        q(json!({"itemId": "A", "total": "5"})),
        one("/data/total", codes::TYPE)
    );
    assert_eq!(
        q(json!({"itemId": "A", "change": {}})),
        one("/data/change/absolute", codes::REQUIRED)
    );
    assert_eq!(
        q(json!({"itemId": "A", "change": 5})),
        one("/data/change", codes::TYPE)
    );
    assert_eq!(
        q(json!({"itemId": "A", "total": 3, "change": {"absolute": 3}})),
        one("/data/change", codes::CONFLICT)
    );
    assert_eq!(
        q(json!({"total": -3})),
        vec![
            ("/data/itemId".to_owned(), codes::REQUIRED.to_owned()),
            ("/data/total".to_owned(), codes::RANGE.to_owned())
        ]
    );
}

// ---------------------------------------------------------------------------------------
// itemReservation

#[test]
fn reservations_per_item_and_per_product() {
    assert_eq!(
        kind(entry(
            "itemReservation",
            json!({"itemId": "A", "reserved": 4})
        )),
        EntryKind::ItemReservation {
            target: ReservationTarget::Item(ItemId::parse("A").expect("valid")),
            reserved: 4
        }
    );
    assert_eq!(
        kind(entry(
            "itemReservation",
            json!({"productId": "P", "reserved": 0})
        )),
        EntryKind::ItemReservation {
            target: ReservationTarget::Product(ProductId::parse("P").expect("valid")),
            reserved: 0
        }
    );
    let r = |data: Value| owned(&bad(entry("itemReservation", data)));
    assert_eq!(
        r(json!({"itemId": "A", "productId": "P", "reserved": 1})),
        one("/data/productId", codes::CONFLICT)
    );
    assert_eq!(
        r(json!({"reserved": 1})),
        one("/data/itemId", codes::REQUIRED)
    );
    assert_eq!(
        r(json!({"itemId": "A"})),
        one("/data/reserved", codes::REQUIRED)
    );
    assert_eq!(
        r(json!({"productId": "P", "reserved": -1})),
        one("/data/reserved", codes::RANGE)
    );
    assert_eq!(
        r(json!({"itemId": "A?", "reserved": 1})),
        one("/data/itemId", codes::FORMAT)
    );
    assert_eq!(
        r(json!({"productId": "P", "reserved": 1.5})),
        one("/data/reserved", codes::RANGE)
    );
}

// ---------------------------------------------------------------------------------------
// pricingSchedule

#[test]
fn pricing_schedule_interval() {
    let s = |v: Value| kind(entry("pricingSchedule", v));
    assert_eq!(
        s(json!({"interval": "PT15M"})),
        EntryKind::PricingSchedule(Schedule::IntervalSeconds(900))
    );
    assert_eq!(
        s(json!({"interval": "PT1M"})),
        EntryKind::PricingSchedule(Schedule::IntervalSeconds(60))
    );
    assert_eq!(
        s(json!({"interval": "P1D"})),
        EntryKind::PricingSchedule(Schedule::IntervalSeconds(86_400))
    );
    assert_eq!(Schedule::default(), Schedule::IntervalSeconds(3_600));
    let e = |v: Value| owned(&bad(entry("pricingSchedule", v)));
    assert_eq!(
        e(json!({"interval": "PT59S"})),
        one("/data/interval", codes::RANGE)
    );
    assert_eq!(
        s(json!({"interval": "P366D"})),
        EntryKind::PricingSchedule(Schedule::IntervalSeconds(366 * 86_400))
    );
    for long in ["P367D", "P9999999999W", "PT18446744073709551615S"] {
        assert_eq!(
            e(json!({ "interval": long })),
            one("/data/interval", codes::RANGE),
            "{long}"
        );
    }
    assert_eq!(
        e(json!({"interval": "15 minutes"})),
        one("/data/interval", codes::FORMAT)
    );
    assert_eq!(
        e(json!({"interval": 900})),
        one("/data/interval", codes::TYPE)
    );
    for calendar in ["P1M", "P1Y", "P1Y2M3DT4H"] {
        let errors = bad(entry("pricingSchedule", json!({ "interval": calendar })));
        assert_eq!(
            pc(&errors),
            [("/data/interval", codes::FORMAT)],
            "{calendar}"
        );
        assert!(errors[0].message.contains("no fixed length"), "{calendar}");
    }
    assert_eq!(e(json!({})), one("/data/interval", codes::REQUIRED));
    assert_eq!(
        e(json!({"interval": "PT5M", "times": ["10:00"]})),
        one("/data/times", codes::CONFLICT)
    );
}

#[test]
fn pricing_schedule_times() {
    assert_eq!(
        kind(entry(
            "pricingSchedule",
            json!({"times": ["18:00", "09:30", "18:00", "00:00", "23:59"]})
        )),
        EntryKind::PricingSchedule(Schedule::TimesOfDay(vec![0, 570, 1080, 1439]))
    );
    let e = |v: Value| owned(&bad(entry("pricingSchedule", v)));
    assert_eq!(e(json!({"times": []})), one("/data/times", codes::RANGE));
    assert_eq!(
        e(json!({"times": "10:00"})),
        one("/data/times", codes::TYPE)
    );
    assert_eq!(
        e(json!({"times": ["10:00", "24:00", "9:30", "10:60", 600]})),
        vec![
            ("/data/times/1".to_owned(), codes::FORMAT.to_owned()),
            ("/data/times/2".to_owned(), codes::FORMAT.to_owned()),
            ("/data/times/3".to_owned(), codes::FORMAT.to_owned()),
            ("/data/times/4".to_owned(), codes::FORMAT.to_owned()),
        ]
    );
    // Two digits each: a sign is not a digit.
    assert_eq!(
        e(json!({"times": ["+1:00", "01:+5", "١٢:00"]})),
        vec![
            ("/data/times/0".to_owned(), codes::FORMAT.to_owned()),
            ("/data/times/1".to_owned(), codes::FORMAT.to_owned()),
            ("/data/times/2".to_owned(), codes::FORMAT.to_owned()),
        ]
    );
    let many: Vec<String> = (0..1441)
        .map(|i| format!("{:02}:{:02}", (i / 60) % 24, i % 60))
        .collect();
    assert_eq!(
        e(json!({ "times": many })),
        one("/data/times", codes::RANGE)
    );
}

#[test]
fn product_schedules_in_a_pricing_schedule_are_removed() {
    let e = single(entry(
        "pricingSchedule",
        json!({"productId": "P", "interval": "PT10M"}),
    ));
    assert_removed(&e, "/data/productId", "instance");
}

// ---------------------------------------------------------------------------------------
// instanceActions

#[test]
fn instance_actions() {
    assert_eq!(
        kind(entry(
            "instanceActions",
            json!({"actions": [
                {"action": "enable", "date": "2026-06-01T00:00:00Z"},
                {"action": "disable", "date": "2026-06-30T00:00:00Z"}
            ]})
        )),
        EntryKind::InstanceActions(vec![
            InstanceAction {
                action: ActionKind::Enable,
                date: ts("2026-06-01T00:00:00Z")
            },
            InstanceAction {
                action: ActionKind::Disable,
                date: ts("2026-06-30T00:00:00Z")
            },
        ])
    );
    let e = |v: Value| owned(&bad(entry("instanceActions", v)));
    assert_eq!(e(json!({})), one("/data/actions", codes::REQUIRED));
    assert_eq!(e(json!({"actions": {}})), one("/data/actions", codes::TYPE));
    assert_eq!(
        e(json!({"actions": []})),
        one("/data/actions", codes::RANGE)
    );
    let many: Vec<Value> = (0..101)
        .map(|_| json!({"action": "enable", "date": "2026-06-01T00:00:00Z"}))
        .collect();
    assert_eq!(
        e(json!({ "actions": many })),
        one("/data/actions", codes::RANGE)
    );
    assert_eq!(
        e(json!({"actions": [
            {"action": "toggle", "date": "2026-06-01T00:00:00Z"},
            {"action": "enable"},
            "enable",
            {"date": "June"}
        ]})),
        vec![
            (
                "/data/actions/0/action".to_owned(),
                codes::FORMAT.to_owned()
            ),
            (
                "/data/actions/1/date".to_owned(),
                codes::REQUIRED.to_owned()
            ),
            ("/data/actions/2".to_owned(), codes::TYPE.to_owned()),
            (
                "/data/actions/3/action".to_owned(),
                codes::REQUIRED.to_owned()
            ),
            ("/data/actions/3/date".to_owned(), codes::FORMAT.to_owned()),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Across kinds.

/// One valid entry of every kind.
fn one_of_each_kind() -> Vec<Value> {
    vec![
        entry(
            "productRegistration",
            json!({"productId": "P", "capacity": 10}),
        ),
        item_reg(item_data()),
        entry("itemRemoval", json!({"itemId": "A"})),
        entry("instanceMetadata", json!({"patch": []})),
        entry("itemMetadata", json!({"itemId": "A", "patch": []})),
        entry("itemProperties", json!({"itemId": "A", "update": {}})),
        entry("productMetadata", json!({"productId": "P", "patch": []})),
        entry("productProperties", json!({"productId": "P", "patch": []})),
        sale(json!({"itemId": "A", "price": 1})),
        entry("itemQuantity", json!({"itemId": "A", "total": 1})),
        entry("itemReservation", json!({"itemId": "A", "reserved": 1})),
        entry("pricingSchedule", json!({"times": ["10:00"]})),
        entry(
            "instanceActions",
            json!({"actions": [{"action": "disable", "date": "2026-06-01T00:00:00Z"}]}),
        ),
    ]
}

#[test]
fn every_kind_round_trips_its_type_name() {
    let entries = one_of_each_kind();
    assert_eq!(entries.len(), 13);
    for v in entries {
        assert_eq!(Some(ok(v.clone()).kind.type_name()), v["type"].as_str());
    }
}

#[test]
fn a_valid_entry_parses_after_earlier_entries_failed() {
    // Submission validates many entries into one error list: a valid entry must not be
    // refused, nor an invalid one accepted, because of someone else's errors.
    for v in one_of_each_kind() {
        let mut errors = Errors::default();
        assert!(
            parse_entry(
                &json!({"type": 1}),
                "/entries/0",
                at_submission(),
                &mut errors
            )
            .is_none()
        );
        let before = errors.len();
        let parsed = parse_entry(&v, "/entries/1", at_submission(), &mut errors);
        assert_eq!(errors.len(), before, "{v}");
        assert!(parsed.is_some(), "{} was refused", v["type"]);
    }
}

#[test]
fn an_invalid_entry_is_never_returned() {
    for v in one_of_each_kind() {
        let broken = set(v.clone(), "/transactionId", json!("no spaces"));
        let (entry, errors) = run(&broken, "");
        assert!(entry.is_none(), "{}", v["type"]);
        assert_eq!(pc(&errors), [("/transactionId", codes::FORMAT)]);
    }
}

/// A patch may not make a member whose name serde_json reserves for itself: stored, the
/// document would read back as something else (a request body cannot hold one either).
#[test]
fn a_patch_that_makes_a_reserved_member_is_refused_at_submit() {
    for (kind, target) in [
        ("instanceMetadata", json!({})),
        ("itemMetadata", json!({"itemId": "i"})),
        ("itemProperties", json!({"itemId": "i"})),
        ("productMetadata", json!({"productId": "p"})),
        ("productProperties", json!({"productId": "p"})),
    ] {
        for op in [
            json!({"op": "add", "path": "/n/$serde_json::private::RawValue", "value": "[1,2]"}),
            json!({"op": "copy", "from": "/a", "path": "/$serde_json::private::Number"}),
            json!({"op": "move", "from": "/a", "path": "/x/$serde_json::private::RawValue/y"}),
        ] {
            let mut data = target.clone();
            data["patch"] = json!([{"op": "test", "path": "/a", "value": 1}, op]);
            let e = single(json!({"type": kind, "data": data}));
            assert_eq!(
                (e.pointer.as_str(), e.code.as_str()),
                ("/data/patch/1/path", codes::FORMAT),
                "{kind} {op}"
            );
            assert!(e.message.contains("reserved"), "{}", e.message);
        }
    }
    // Removing one (a document that holds one from before) is allowed, and so is a name
    // that only mentions the prefix.
    ok(
        json!({"type": "itemMetadata", "data": {"itemId": "i", "patch": [
        {"op": "remove", "path": "/n/$serde_json::private::RawValue"},
        {"op": "add", "path": "/x$serde_json::private::RawValue", "value": 1}]}}),
    );
    // A rule for new entries: one logged before it (the processor re-reads the log, a
    // signed log may be resubmitted, `simulate log` replays it) still parses.
    let logged = json!({"type": "itemMetadata", "data": {"itemId": "i", "patch": [
        {"op": "add", "path": "/n/$serde_json::private::RawValue", "value": "[1,2]"}]}});
    let mut errors = Errors::default();
    let entry = parse_entry(&logged, "", ParseOptions::default(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(entry.is_some());
}

/// Depth and operation count are syntactic: a value too deep for its path, a registration
/// document too deep, a patch with too many operations are 400s at submit.
#[test]
fn documents_too_deep_and_patches_too_long_are_refused_at_submit() {
    let nested = |levels: usize| (0..levels).fold(json!(1), |v, _| json!({ "a": v }));
    let e = single(json!({"type": "instanceMetadata", "data": {"patch": [
        {"op": "add", "path": "/x/y", "value": nested(31)}]}}));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/patch/0/value", "tooDeep")
    );
    // 30 levels under a two-token path fit (2 + 30 = 32).
    ok(json!({"type": "instanceMetadata", "data": {"patch": [
        {"op": "add", "path": "/x/y", "value": nested(30)}]}}));
    let e = single(
        json!({"type": "itemMetadata", "data": {"itemId": "i", "update": {"x": nested(32)}}}),
    );
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/update/x", "tooDeep")
    );
    let e = single(json!({"type": "productRegistration", "data": {
        "productId": "p", "capacity": 1, "metadata": {"x": nested(40)}}}));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/metadata", "tooDeep")
    );
    let ops: Vec<Value> = (0..=crate::document::MAX_PATCH_OPERATIONS)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    let e = single(json!({"type": "instanceMetadata", "data": {"patch": ops}}));
    assert_eq!(
        (e.pointer.as_str(), e.code.as_str()),
        ("/data/patch", "tooLarge")
    );
}

/// The rules for new entries (a whole priceSettings, a model, a rounding or a
/// recalculation held to the registration's rules; an interval of at most P366D) are
/// submission's: the stored log, and a JWS the service signed itself, are read as they
/// were accepted, before those rules.
#[test]
fn the_rules_for_new_entries_do_not_apply_to_the_log_as_it_was_accepted() {
    let entries = [
        entry("pricingSchedule", json!({"interval": "P400D"})),
        entry(
            "itemProperties",
            json!({"itemId": "A", "update": {"priceSettings": {"min": 50, "max": 40, "default": 45}}}),
        ),
        entry(
            "productProperties",
            json!({"productId": "P", "patch": [
                {"op": "add", "path": "/recalculation", "value": {"soldPercentStep": 0}},
                {"op": "add", "path": "/pricingModel", "value": "bogus"},
                {"op": "add", "path": "/rounding", "value": {"step": 0}},
            ]}),
        ),
    ];
    for e in &entries {
        assert!(!bad(e.clone()).is_empty(), "refused at submission: {e}");
        let mut errors = Errors::default();
        let read = parse_entry(e, "", ParseOptions::default(), &mut errors);
        assert!(read.is_some() && errors.is_empty(), "{e}: {errors:?}");
    }
}
