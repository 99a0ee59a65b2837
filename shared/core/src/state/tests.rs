//! The apply step: every kind, every semantic error code, counts and dirty tracking.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

use super::*;
use crate::entry::{ParseOptions, parse_entry};
use crate::model::LogRecord;
use crate::process::apply_record;
use crate::time::Period;
use crate::validate::MAX_COUNT;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("a valid timestamp")
}

fn item_id(s: &str) -> ItemId {
    ItemId::parse(s).expect("a valid item id")
}

fn product_id(s: &str) -> ProductId {
    ProductId::parse(s).expect("a valid product id")
}

#[track_caller]
fn parse(v: Value) -> Entry {
    let mut errors = Errors::default();
    let entry = parse_entry(&v, "", ParseOptions::default(), &mut errors);
    assert!(
        errors.is_empty(),
        "the test entry is invalid: {:#?}",
        errors.list
    );
    entry.expect("an entry")
}

fn entry(type_name: &str, data: Value) -> Entry {
    parse(json!({ "type": type_name, "data": data }))
}

fn product(id: &str, capacity: Option<u64>) -> Entry {
    let mut data = json!({ "productId": id });
    if let Some(c) = capacity {
        data["capacity"] = json!(c);
    }
    entry("productRegistration", data)
}

fn item_data(id: &str, product: &str) -> Value {
    json!({
        "itemId": id,
        "productId": product,
        "salesPeriod": {"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"},
        "priceSettings": {"min": 10, "max": 100, "default": 50}
    })
}

fn item(id: &str, product: &str) -> Entry {
    entry("itemRegistration", item_data(id, product))
}

fn legacy_item(id: &str, product: &str, quantity: u64) -> Entry {
    let mut data = item_data(id, product);
    data["quantity"] = json!(quantity);
    entry("itemRegistration", data)
}

fn sale(id: &str, quantity: i64, price: f64) -> Entry {
    entry(
        "itemSale",
        json!({"itemId": id, "quantity": quantity, "price": price}),
    )
}

fn pool_sale(id: &str, quantity: i64) -> Entry {
    entry(
        "itemSale",
        json!({"itemId": id, "quantity": quantity, "price": 10, "pool": true}),
    )
}

fn total(id: &str, total: u64) -> Entry {
    entry("itemQuantity", json!({"itemId": id, "total": total}))
}

fn reserve_item(id: &str, reserved: u64) -> Entry {
    entry(
        "itemReservation",
        json!({"itemId": id, "reserved": reserved}),
    )
}

fn reserve_product(id: &str, reserved: u64) -> Entry {
    entry(
        "itemReservation",
        json!({"productId": id, "reserved": reserved}),
    )
}

fn removal(id: &str) -> Entry {
    entry("itemRemoval", json!({"itemId": id}))
}

fn patch(type_name: &str, ids: Value, ops: Value) -> Entry {
    let mut data = ids;
    data["patch"] = ops;
    entry(type_name, data)
}

fn item_props(id: &str, ops: Value) -> Entry {
    patch("itemProperties", json!({"itemId": id}), ops)
}

fn product_props(id: &str, ops: Value) -> Entry {
    patch("productProperties", json!({"productId": id}), ops)
}

fn meta(ops: Value) -> Entry {
    patch("instanceMetadata", json!({}), ops)
}

/// An instance under test; every entry gets the next sequence.
struct T {
    s: InstanceState,
}

impl T {
    fn new() -> Self {
        T {
            s: InstanceState::default(),
        }
    }

    /// Product P (capacity 100) with items A and B.
    fn standard() -> Self {
        let mut t = T::new();
        t.ok(&product("P", Some(100)));
        t.ok(&item("A", "P"));
        t.ok(&item("B", "P"));
        t
    }

    fn next_seq(&self) -> u64 {
        self.s.header.applied_seq + 1
    }

    fn apply(&mut self, e: &Entry) -> Result<Dirty, Rejection> {
        let mut dirty = Dirty::default();
        let seq = self.next_seq();
        self.s.apply_logged(e, seq, &mut dirty).map(|()| dirty)
    }

    #[track_caller]
    fn ok(&mut self, e: &Entry) -> Dirty {
        match self.apply(e) {
            Ok(d) => d,
            Err(r) => panic!("{} was rejected: {r:?}", e.kind.type_name()),
        }
    }

    /// Applies an entry that must be rejected and checks it changed nothing else.
    #[track_caller]
    fn err(&mut self, e: &Entry) -> Rejection {
        let mut expected = self.s.clone();
        expected.header.applied_seq += 1;
        let r = match self.apply(e) {
            Ok(_) => panic!("{} was accepted", e.kind.type_name()),
            Err(r) => r,
        };
        assert_eq!(self.s, expected, "a rejected entry changed the state");
        r
    }

    #[track_caller]
    fn code(&mut self, e: &Entry) -> (String, String) {
        let r = self.err(e);
        (r.code, r.pointer)
    }

    fn item(&self, id: &str) -> &ItemState {
        self.s.items.get(&item_id(id)).expect("a registered item")
    }

    fn product(&self, id: &str) -> &ProductState {
        self.s
            .products
            .get(&product_id(id))
            .expect("a registered product")
    }

    fn item_counts(&self, id: &str) -> Counts {
        let totals = self.s.product_totals();
        self.s.item_counts(self.item(id), &totals)
    }

    fn product_counts(&self, id: &str) -> Counts {
        let totals = self.s.product_totals();
        let t = totals
            .get(&product_id(id))
            .copied()
            .expect("totals of every product");
        InstanceState::product_counts(self.product(id), &t)
    }
}

fn counts(sold: u64, reserved: u64, available: u64, oversold: u64) -> Counts {
    Counts {
        sold,
        reserved,
        available,
        oversold,
    }
}

fn pair(code: &str, pointer: &str) -> (String, String) {
    (code.to_owned(), pointer.to_owned())
}

// ---------------------------------------------------------------------------------------
// Registrations.

#[test]
fn product_registration_creates_a_product() {
    let mut t = T::new();
    t.ok(&entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 100, "expectedSales": 0.5, "metadata": {"zone": "North"}}),
    ));
    let p = t.product("P");
    assert_eq!(p.properties.capacity, Some(100));
    assert_eq!(p.properties.expected_sales, 0.5);
    assert_eq!(p.metadata.get("zone"), Some(&json!("North")));
    assert_eq!((p.reserved, p.seq), (0, 1));
    assert_eq!(t.s.header.applied_seq, 1);
}

#[test]
fn repeated_product_registration_updates_and_keeps_counts() {
    let mut t = T::standard();
    t.ok(&entry(
        "productMetadata",
        json!({"productId": "P", "update": {"zone": "A"}}),
    ));
    t.ok(&reserve_product("P", 5));
    t.ok(&sale("A", 3, 10.0));
    t.ok(&product("P", Some(200)));
    let p = t.product("P");
    assert_eq!(p.properties.capacity, Some(200));
    assert_eq!(p.metadata.get("zone"), Some(&json!("A")), "metadata kept");
    assert_eq!(p.reserved, 5, "reservation kept");
    assert_eq!(p.seq, t.s.header.applied_seq);
    assert_eq!(t.product_counts("P"), counts(3, 5, 192, 0));
    // With metadata, the metadata is replaced.
    t.ok(&entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 200, "metadata": {"zone": "B"}}),
    ));
    assert_eq!(t.product("P").metadata.get("zone"), Some(&json!("B")));
}

#[test]
fn strict_repeat_registrations_are_rejected() {
    let mut t = T::standard();
    let strict_product = entry(
        "productRegistration",
        json!({"productId": "P", "capacity": 5, "strict": true}),
    );
    assert_eq!(
        t.code(&strict_product),
        pair(rejection_codes::ALREADY_REGISTERED, "/data/productId")
    );
    let mut data = item_data("A", "P");
    data["strict"] = json!(true);
    let strict_item = entry("itemRegistration", data);
    assert_eq!(
        t.code(&strict_item),
        pair(rejection_codes::ALREADY_REGISTERED, "/data/itemId")
    );
    // Strict registrations of new ids are fine.
    let mut t = T::new();
    t.ok(&strict_product);
    t.ok(&strict_item);
}

#[test]
fn items_need_a_registered_product() {
    let mut t = T::new();
    let r = t.err(&item("A", "P"));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (rejection_codes::UNKNOWN_PRODUCT, "/data/productId")
    );
    assert!(
        r.message.contains("never created implicitly"),
        "{}",
        r.message
    );
    assert!(t.s.items.is_empty() && t.s.products.is_empty());
}

#[test]
fn item_registration_creates_an_item() {
    let t = T::standard();
    let a = t.item("A");
    assert_eq!(a.product_id.as_str(), "P");
    assert_eq!(
        a.properties.sales_period,
        Period::new(ts("2026-06-01T00:00:00Z"), ts("2026-07-01T00:00:00Z")).expect("period")
    );
    assert_eq!(
        (a.sold, a.reserved, a.total, a.legacy_quantity),
        (0, 0, None, None)
    );
    assert_eq!(
        (a.revenue_micros, a.last_sale_at, a.removed),
        (0, None, false)
    );
    assert_eq!(a.seq, 2);
    assert!(a.metadata.is_empty());
}

#[test]
fn repeated_item_registration_keeps_counts() {
    let mut t = T::standard();
    t.ok(&entry(
        "itemMetadata",
        json!({"itemId": "A", "update": {"seat": "1A"}}),
    ));
    t.ok(&sale("A", 4, 20.0));
    t.ok(&reserve_item("A", 2));
    t.ok(&total("A", 10));
    let before = t.item("A").clone();
    let mut data = item_data("A", "P");
    data["priceSettings"] = json!({"min": 1, "max": 2, "default": 1.5});
    t.ok(&entry("itemRegistration", data));
    let a = t.item("A");
    assert_eq!(a.properties.price_settings.max.micros(), 2_000_000);
    assert_eq!(
        (a.sold, a.reserved, a.total, a.revenue_micros),
        (4, 2, Some(10), 80_000_000)
    );
    assert_eq!(a.metadata, before.metadata, "metadata kept when not given");
    assert_eq!(a.seq, t.s.header.applied_seq);
    // A repeat may move the item to another product.
    t.ok(&product("Q", Some(5)));
    t.ok(&item("A", "Q"));
    assert_eq!(t.item("A").product_id.as_str(), "Q");
    assert_eq!(t.item("A").sold, 4);
    assert_eq!(t.product_counts("Q"), counts(4, 2, 0, 1));
    assert_eq!(t.product_counts("P"), counts(0, 0, 100, 0));
}

// ---------------------------------------------------------------------------------------
// Removal, unknown and removed items.

#[test]
fn removed_items_refuse_everything() {
    let mut t = T::standard();
    t.ok(&sale("A", 2, 10.0));
    t.ok(&removal("A"));
    assert!(t.item("A").removed);
    let removed = pair(rejection_codes::ITEM_REMOVED, "/data/itemId");
    let entries = [
        sale("A", 1, 10.0),
        sale("A", -1, 10.0),
        total("A", 5),
        reserve_item("A", 1),
        removal("A"),
        item("A", "P"),
        patch(
            "itemMetadata",
            json!({"itemId": "A"}),
            json!([{"op": "add", "path": "/x", "value": 1}]),
        ),
        item_props(
            "A",
            json!([{"op": "replace", "path": "/dynamicPricing", "value": false}]),
        ),
    ];
    for e in &entries {
        assert_eq!(t.code(e), removed, "{}", e.kind.type_name());
    }
    // A removed item's units sold stay sold: they keep their share of the capacity.
    assert_eq!(t.product_counts("P"), counts(2, 0, 98, 0));
}

#[test]
fn unknown_items_and_products_are_rejected() {
    let mut t = T::standard();
    let unknown_item = pair(rejection_codes::UNKNOWN_ITEM, "/data/itemId");
    let entries = [
        sale("X", 1, 10.0),
        total("X", 5),
        reserve_item("X", 1),
        removal("X"),
        patch(
            "itemMetadata",
            json!({"itemId": "X"}),
            json!([{"op": "add", "path": "/x", "value": 1}]),
        ),
        item_props("X", json!([])),
    ];
    for e in &entries {
        let r = t.err(e);
        assert_eq!(
            (r.code.clone(), r.pointer.clone()),
            unknown_item,
            "{}",
            e.kind.type_name()
        );
        assert!(r.message.contains('X'), "{}", r.message);
    }
    let unknown_product = pair(rejection_codes::UNKNOWN_PRODUCT, "/data/productId");
    let entries = [
        reserve_product("Q", 1),
        item("C", "Q"),
        patch(
            "productMetadata",
            json!({"productId": "Q"}),
            json!([{"op": "add", "path": "/zone", "value": "N"}]),
        ),
        product_props("Q", json!([])),
    ];
    for e in &entries {
        assert_eq!(t.code(e), unknown_product, "{}", e.kind.type_name());
    }
}

// ---------------------------------------------------------------------------------------
// Documents: metadata and properties.

fn main_date() -> Value {
    json!({"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T23:00:00Z"}, "tags": ["main"]})
}

#[test]
fn instance_metadata_patch_and_update() {
    let mut t = T::new();
    let d = t.ok(&meta(json!([
        {"op": "add", "path": "/dates", "value": [main_date()]},
        {"op": "add", "path": "/location", "value": {"coord": {"lat": 1, "lon": 2}}}
    ])));
    assert!(d.header);
    assert_eq!(t.s.header.meta.get("dates"), Some(&json!([main_date()])));
    t.ok(&entry(
        "instanceMetadata",
        json!({"update": {"location": null, "name": "Show"}}),
    ));
    assert_eq!(
        Value::Object(t.s.header.meta.clone()),
        json!({"dates": [main_date()], "name": "Show"})
    );
    // Dates are kept in UTC, as every time on the wire.
    t.ok(&meta(json!([{"op": "add", "path": "/dates/-", "value":
        {"date": {"start": "2026-06-02T20:00:00+02:00", "end": "2026-06-02T23:00:00-01:00"}}}])));
    assert_eq!(
        t.s.header.meta["dates"][1]["date"],
        json!({"start": "2026-06-02T18:00:00Z", "end": "2026-06-03T00:00:00Z"})
    );
}

#[test]
fn failing_patches_are_rejected_whole() {
    let mut t = T::new();
    t.ok(&meta(
        json!([{"op": "add", "path": "/dates", "value": [main_date()]}]),
    ));
    let failed = |t: &mut T, ops: Value| {
        let r = t.err(&meta(ops));
        assert_eq!(r.code, rejection_codes::PATCH_FAILED);
        assert_eq!(r.pointer, "/data/patch");
        r.message
    };
    // A test op that does not match; the add before it is not kept.
    failed(
        &mut t,
        json!([
            {"op": "add", "path": "/name", "value": "x"},
            {"op": "test", "path": "/dates/0/tags/0", "value": "other"}
        ]),
    );
    // Paths that do not exist.
    failed(&mut t, json!([{"op": "remove", "path": "/nope"}]));
    failed(
        &mut t,
        json!([{"op": "replace", "path": "/dates/5", "value": main_date()}]),
    );
    failed(&mut t, json!([{"op": "add", "path": "/a/b", "value": 1}]));
    failed(
        &mut t,
        json!([{"op": "copy", "from": "/nope", "path": "/x"}]),
    );
    assert!(!t.s.header.meta.contains_key("name"));
}

/// The review's amplification (one add, then copies of the root) and a depth bomb built
/// with copy, on every document kind: refused while the patch runs, nothing kept.
#[test]
fn hostile_patches_are_refused_on_every_document_kind() {
    let mut t = T::new();
    t.ok(&product("p", Some(10)));
    t.ok(&item("i", "p"));
    let mut bomb = vec![json!({"op": "add", "path": "/blob", "value": "x".repeat(1_000)})];
    bomb.extend((0..30).map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")})));
    let nested = (0..20).fold(json!(1), |v, _| json!({ "a": v }));
    let deep_path: String = (0..20).map(|_| "/a").collect();
    let deep = json!([
        {"op": "add", "path": "/a", "value": nested},
        {"op": "copy", "from": "/a", "path": format!("/a{deep_path}")}
    ]);
    let kinds = [
        ("instanceMetadata", json!({})),
        ("itemMetadata", json!({"itemId": "i"})),
        ("itemProperties", json!({"itemId": "i"})),
        ("productMetadata", json!({"productId": "p"})),
        ("productProperties", json!({"productId": "p"})),
    ];
    let before = t.s.clone();
    for (kind, ids) in kinds {
        let r = t.err(&patch(kind, ids.clone(), Value::Array(bomb.clone())));
        assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_LARGE, "{kind}: {r:?}");
        assert!(r.message.contains("at most 65536"), "{}", r.message);
        let r = t.err(&patch(kind, ids, deep.clone()));
        assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_DEEP, "{kind}: {r:?}");
    }
    assert_eq!(t.s.items, before.items);
    assert_eq!(t.s.products, before.products);
    assert_eq!(t.s.header.meta, before.header.meta);
}

#[test]
fn patched_instance_metadata_must_keep_the_rules() {
    let mut t = T::new();
    t.ok(&meta(json!([
        {"op": "add", "path": "/dates", "value": [main_date()]},
        {"op": "add", "path": "/note", "value": "vip"}
    ])));
    // Undecidable from the entry: the value comes from elsewhere in the document.
    let r = t.err(&meta(json!([
        {"op": "copy", "from": "/note", "path": "/dates/0/tags/-"}
    ])));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (rejection_codes::INVALID_DOCUMENT, "/data/patch")
    );
    assert!(r.message.contains("/dates/0/tags/1"), "{}", r.message);
    assert!(r.message.contains("main"), "{}", r.message);
    let r = t.err(&meta(json!([
        {"op": "move", "from": "/note", "path": "/dates/0/tags/0"},
        {"op": "copy", "from": "/dates/0/tags/0", "path": "/dates/0/tags/-"}
    ])));
    assert!(r.message.ends_with("(and 1 more)"), "{}", r.message);
    // The document must stay an object.
    let r = t.err(&meta(json!([{"op": "copy", "from": "/dates", "path": ""}])));
    assert_eq!(r.code, rejection_codes::INVALID_DOCUMENT);
}

#[test]
fn documents_are_limited_to_64_kib() {
    // `{"b":""}` is 8 bytes.
    let fill = |n: usize| json!([{"op": "add", "path": "/b", "value": "x".repeat(n)}]);
    let mut t = T::standard();
    t.ok(&meta(fill(MAX_DOCUMENT_BYTES - 8)));
    let r = t.err(&meta(fill(MAX_DOCUMENT_BYTES - 7)));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (rejection_codes::DOCUMENT_TOO_LARGE, "/data/patch")
    );
    assert!(r.message.contains("65537"), "{}", r.message);
    // A deprecated `update` is pointed at as what it is.
    let r = t.err(&entry(
        "instanceMetadata",
        json!({"update": {"c": "x".repeat(MAX_DOCUMENT_BYTES)}}),
    ));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (rejection_codes::DOCUMENT_TOO_LARGE, "/data/update")
    );
    // The limit counts the whole document, grown over several entries.
    t.ok(&patch(
        "itemMetadata",
        json!({"itemId": "A"}),
        json!([{"op": "add", "path": "/a", "value": "x".repeat(40_000)}]),
    ));
    let r = t.err(&patch(
        "itemMetadata",
        json!({"itemId": "A"}),
        json!([{"op": "add", "path": "/b", "value": "x".repeat(40_000)}]),
    ));
    assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_LARGE);
    let r = t.err(&entry(
        "productMetadata",
        json!({"productId": "P", "update": {"b": "x".repeat(70_000)}}),
    ));
    assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_LARGE);
    let r = t.err(&item_props(
        "B",
        json!([{"op": "add", "path": "/notes", "value": "x".repeat(70_000)}]),
    ));
    assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_LARGE);
    let r = t.err(&product_props(
        "P",
        json!([{"op": "add", "path": "/notes", "value": "x".repeat(70_000)}]),
    ));
    assert_eq!(r.code, rejection_codes::DOCUMENT_TOO_LARGE);
}

#[test]
fn item_and_product_metadata() {
    let mut t = T::standard();
    t.ok(&patch(
        "itemMetadata",
        json!({"itemId": "A"}),
        json!([{"op": "add", "path": "/seat", "value": {"row": 1}}, {"op": "add", "path": "/seat/col", "value": 2}]),
    ));
    assert_eq!(
        t.item("A").metadata.to_map().get("seat"),
        Some(&json!({"row": 1, "col": 2}))
    );
    t.ok(&patch(
        "productMetadata",
        json!({"productId": "P"}),
        json!([{"op": "add", "path": "/zone", "value": "North"}]),
    ));
    assert_eq!(t.product("P").metadata.get("zone"), Some(&json!("North")));
    assert_eq!(t.product("P").seq, t.s.header.applied_seq);
    let r = t.err(&patch(
        "productMetadata",
        json!({"productId": "P"}),
        json!([{"op": "test", "path": "/zone", "value": "South"}]),
    ));
    assert_eq!(r.code, rejection_codes::PATCH_FAILED);
    t.ok(&entry(
        "itemMetadata",
        json!({"itemId": "A", "update": {"seat": null, "gate": 3}}),
    ));
    assert_eq!(
        Value::Object(t.item("A").metadata.to_map()),
        json!({"gate": 3})
    );
}

#[test]
fn item_properties_patches() {
    let mut t = T::standard();
    t.ok(&item_props(
        "A",
        json!([
            {"op": "test", "path": "/priceSettings/multiplier", "value": 1.0},
            {"op": "test", "path": "/dynamicPricing", "value": true},
            {"op": "replace", "path": "/priceSettings/default", "value": 60},
            {"op": "replace", "path": "/dynamicPricing", "value": false},
            {"op": "add", "path": "/dynamicPricingPeriod", "value": {"start": "2026-06-10T00:00:00Z", "end": "2026-06-20T00:00:00Z"}},
            {"op": "add", "path": "/color", "value": "red"}
        ]),
    ));
    let a = t.item("A");
    assert_eq!(a.properties.price_settings.default.micros(), 60_000_000);
    assert!(!a.properties.dynamic_pricing);
    assert_eq!(
        a.properties.dynamic_pricing_period,
        Period::new(ts("2026-06-10T00:00:00Z"), ts("2026-06-20T00:00:00Z"))
    );
    assert_eq!(
        a.properties.extra.to_map().get("color"),
        Some(&json!("red"))
    );
    // Client properties survive later changes; the deprecated update merges at the root.
    t.ok(&entry(
        "itemProperties",
        json!({"itemId": "A", "update": {"dynamicPricing": true, "size": "L"}}),
    ));
    let a = t.item("A");
    assert!(a.properties.dynamic_pricing);
    assert_eq!(
        a.properties.extra.to_map().get("color"),
        Some(&json!("red"))
    );
    assert_eq!(a.properties.extra.to_map().get("size"), Some(&json!("L")));
    // The sales period can be moved; the old name is accepted in patches too.
    t.ok(&item_props(
        "A",
        json!([{"op": "replace", "path": "/salesPeriod/end", "value": "2026-08-01T00:00:00Z"}]),
    ));
    assert_eq!(
        t.item("A").properties.sales_period.end,
        ts("2026-08-01T00:00:00Z")
    );
    t.ok(&item_props(
        "B",
        json!([
            {"op": "remove", "path": "/salesPeriod"},
            {"op": "add", "path": "/dates", "value": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"}}
        ]),
    ));
    let b = t.item("B");
    assert_eq!(b.properties.sales_period.start, ts("2026-01-01T00:00:00Z"));
    assert!(b.properties.extra.is_empty());
}

#[test]
fn deprecated_item_quantity_is_accepted_and_ignored() {
    // INTERFACE.md: quantity is deprecated and ignored since 3.0.0; capacities are set up
    // from legacy quantities.
    let mut t = T::new();
    t.ok(&product("P", None));
    let mut data = item_data("A", "P");
    data["properties"] = json!({"quantity": 30, "color": "red"});
    t.ok(&entry("itemRegistration", data));
    let a = t.item("A");
    assert_eq!(a.legacy_quantity, Some(30));
    assert!(!a.properties.extra.to_map().contains_key("quantity"));
    assert_eq!(t.item_counts("A"), counts(0, 0, 30, 0));
    // Every patch operation on /quantity does nothing; the others apply.
    t.ok(&item_props(
        "A",
        json!([
            {"op": "add", "path": "/quantity", "value": 5},
            {"op": "replace", "path": "/quantity", "value": 6},
            {"op": "test", "path": "/quantity", "value": 7},
            {"op": "remove", "path": "/quantity"},
            {"op": "copy", "from": "/quantity", "path": "/copied"},
            {"op": "move", "from": "/color", "path": "/quantity"},
            {"op": "add", "path": "/quantity/nested", "value": 1},
            {"op": "replace", "path": "/priceSettings/default", "value": 60}
        ]),
    ));
    let a = t.item("A");
    assert_eq!(a.properties.price_settings.default.micros(), 60_000_000);
    assert_eq!(
        a.properties.extra.to_map().get("color"),
        Some(&json!("red"))
    );
    assert!(!a.properties.extra.to_map().contains_key("quantity"));
    assert!(!a.properties.extra.to_map().contains_key("copied"));
    assert_eq!((a.legacy_quantity, a.total), (Some(30), None));
    // A failing operation keeps its number although ignored ones came before it.
    let r = t.err(&item_props(
        "A",
        json!([{"op": "remove", "path": "/quantity"}, {"op": "remove", "path": "/nothing"}]),
    ));
    assert_eq!(r.code, rejection_codes::PATCH_FAILED);
    assert!(r.message.contains("operation '/1'"), "{}", r.message);
    // The deprecated update and a whole replaced document ignore it too.
    t.ok(&entry(
        "itemProperties",
        json!({"itemId": "A", "update": {"quantity": 9, "size": "L"}}),
    ));
    let mut whole = serde_json::to_value(&t.item("A").properties).expect("a document");
    whole["quantity"] = json!(11);
    t.ok(&item_props(
        "A",
        json!([{"op": "replace", "path": "", "value": whole}]),
    ));
    let a = t.item("A");
    assert_eq!(a.properties.extra.to_map().get("size"), Some(&json!("L")));
    assert!(!a.properties.extra.to_map().contains_key("quantity"));
    assert_eq!(t.item_counts("A"), counts(0, 0, 30, 0));
    // Client metadata may still hold its own `quantity`.
    t.ok(&patch(
        "itemMetadata",
        json!({"itemId": "A"}),
        json!([{"op": "add", "path": "/quantity", "value": 3}]),
    ));
    assert_eq!(
        t.item("A").metadata.to_map().get("quantity"),
        Some(&json!(3))
    );
}

#[test]
fn dates_alias_takes_effect_in_patches_and_updates() {
    let june = || json!({"start": "2026-06-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"});
    let period = |a: &str, b: &str| Period::new(ts(a), ts(b)).expect("a period");
    let mut t = T::standard();
    t.ok(&item_props(
        "A",
        json!([{"op": "replace", "path": "/dates", "value": {"start": "2026-05-01T00:00:00Z", "end": "2026-08-01T00:00:00Z"}}]),
    ));
    let a = t.item("A");
    assert_eq!(
        a.properties.sales_period,
        period("2026-05-01T00:00:00Z", "2026-08-01T00:00:00Z")
    );
    assert!(a.properties.extra.is_empty());
    t.ok(&item_props(
        "A",
        json!([
            {"op": "test", "path": "/dates/start", "value": "2026-05-01T00:00:00Z"},
            {"op": "replace", "path": "/dates/end", "value": "2026-09-01T00:00:00Z"}
        ]),
    ));
    assert_eq!(
        t.item("A").properties.sales_period,
        period("2026-05-01T00:00:00Z", "2026-09-01T00:00:00Z")
    );
    // The deprecated update: dates alone takes effect; salesPeriod wins over it.
    t.ok(&entry(
        "itemProperties",
        json!({"itemId": "B", "update": {"dates": {"start": "2026-04-01T00:00:00Z", "end": "2026-05-01T00:00:00Z"}}}),
    ));
    assert_eq!(
        t.item("B").properties.sales_period,
        period("2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z")
    );
    t.ok(&entry(
        "itemProperties",
        json!({"itemId": "B", "update": {"dates": {"start": "2020-01-01T00:00:00Z", "end": "2020-02-01T00:00:00Z"}, "salesPeriod": june()}}),
    ));
    let b = t.item("B");
    assert_eq!(
        b.properties.sales_period,
        period("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z")
    );
    assert!(b.properties.extra.is_empty());
    // A broken period under the old name is refused like one under the new.
    let r = t.err(&item_props(
        "A",
        json!([{"op": "replace", "path": "/dates/end", "value": "2020-01-01T00:00:00Z"}]),
    ));
    assert!(r.message.contains("at /salesPeriod/end:"), "{}", r.message);
}

#[test]
fn patched_item_properties_must_keep_the_rules() {
    let mut t = T::standard();
    t.ok(&item_props(
        "A",
        json!([{"op": "add", "path": "/floor", "value": -5}, {"op": "add", "path": "/big", "value": 1000}]),
    ));
    let cases = [
        // min > max
        (
            json!([{"op": "replace", "path": "/priceSettings/min", "value": 200}]),
            "/priceSettings/max",
        ),
        // default outside [min, max]
        (
            json!([{"op": "replace", "path": "/priceSettings/default", "value": 5}]),
            "/priceSettings/default",
        ),
        (
            json!([{"op": "copy", "from": "/big", "path": "/priceSettings/default"}]),
            "/priceSettings/default",
        ),
        // A negative value that the entry alone did not show.
        (
            json!([{"op": "copy", "from": "/floor", "path": "/priceSettings/min"}]),
            "/priceSettings/min",
        ),
        (
            json!([{"op": "copy", "from": "/floor", "path": "/priceSettings/multiplier"}]),
            "/priceSettings/multiplier",
        ),
        // Required fields.
        (
            json!([{"op": "remove", "path": "/salesPeriod"}]),
            "/salesPeriod",
        ),
        (
            json!([{"op": "remove", "path": "/priceSettings/max"}]),
            "/priceSettings/max",
        ),
        // Types and periods.
        (
            json!([{"op": "replace", "path": "/dynamicPricing", "value": "no"}]),
            "/dynamicPricing",
        ),
        (
            json!([{"op": "replace", "path": "/salesPeriod/end", "value": "2026-01-01T00:00:00Z"}]),
            "/salesPeriod/end",
        ),
        // Removed fields.
        (
            json!([{"op": "move", "from": "/big", "path": "/priceSettings/constantPrice"}]),
            "/priceSettings/constantPrice",
        ),
    ];
    for (ops, at) in cases {
        let r = t.err(&item_props("A", ops.clone()));
        assert_eq!(
            (r.code.as_str(), r.pointer.as_str()),
            (rejection_codes::INVALID_DOCUMENT, "/data/patch"),
            "{ops}"
        );
        assert!(
            r.message.contains(&format!("at {at}:")),
            "{ops}: {}",
            r.message
        );
    }
    let r = t.err(&item_props(
        "A",
        json!([{"op": "replace", "path": "", "value": "flat"}]),
    ));
    assert_eq!(r.code, rejection_codes::INVALID_DOCUMENT);
}

#[test]
fn properties_patches_see_the_document_details_show() {
    // Details show unset optional properties as `null`; a patch made by diffing them
    // (`replace` or `test` of a `null` member) applies, and a client's `100` tests equal
    // to the stored `100.0`.
    let mut t = T::standard();
    t.ok(&item_props(
        "A",
        json!([
            {"op": "test", "path": "/dynamicPricingPeriod", "value": null},
            {"op": "replace", "path": "/dynamicPricingPeriod", "value": {"start": "2026-06-10T00:00:00Z", "end": "2026-06-20T00:00:00Z"}},
            {"op": "test", "path": "/priceSettings/multiplier", "value": 1}
        ]),
    ));
    assert_eq!(
        t.item("A").properties.dynamic_pricing_period,
        Period::new(ts("2026-06-10T00:00:00Z"), ts("2026-06-20T00:00:00Z"))
    );
    t.ok(&item_props(
        "A",
        json!([{"op": "replace", "path": "/dynamicPricingPeriod", "value": null}]),
    ));
    assert_eq!(t.item("A").properties.dynamic_pricing_period, None);
    t.ok(&product_props(
        "P",
        json!([
            {"op": "test", "path": "/recalculation", "value": null},
            {"op": "replace", "path": "/recalculation", "value": {"soldPercentStep": 10}},
            {"op": "test", "path": "/capacity", "value": 100.0}
        ]),
    ));
    assert_eq!(
        t.product("P").properties.recalculation,
        Some(crate::entry::Recalculation {
            sold_percent_step: 10.0
        })
    );
    let r = t.err(&product_props(
        "P",
        json!([{"op": "test", "path": "/recalculation", "value": null}]),
    ));
    assert_eq!(r.code, rejection_codes::PATCH_FAILED);
}

#[test]
fn product_properties_patches() {
    let mut t = T::standard();
    t.ok(&product_props(
        "P",
        json!([
            {"op": "replace", "path": "/capacity", "value": 50},
            {"op": "add", "path": "/recalculation", "value": {"soldPercentStep": 5}},
            {"op": "replace", "path": "/pricingModel", "value": "fixed"},
            {"op": "replace", "path": "/rounding/step", "value": 0.5},
            {"op": "add", "path": "/audience", "value": "adults"}
        ]),
    ));
    let p = &t.product("P").properties;
    assert_eq!(p.capacity, Some(50));
    assert_eq!(
        p.recalculation,
        Some(crate::entry::Recalculation {
            sold_percent_step: 5.0
        })
    );
    assert_eq!(
        p.pricing_model,
        crate::entry::PricingModel::Fixed {
            max_step_change: None
        }
    );
    assert_eq!(p.rounding.step.micros(), 500_000);
    assert_eq!(p.extra.get("audience"), Some(&json!("adults")));
    assert_eq!(t.product_counts("P"), counts(0, 0, 50, 0));
    t.ok(&product_props(
        "P",
        json!([{"op": "remove", "path": "/capacity"}]),
    ));
    assert_eq!(t.product("P").properties.capacity, None);
    t.ok(&product_props(
        "P",
        json!([{"op": "add", "path": "/capacity", "value": 80}]),
    ));
    let cases = [
        json!([{"op": "copy", "from": "/capacity", "path": "/expectedSales"}]),
        // A negative capacity is refused at submission; only applying tells this one.
        json!([{"op": "copy", "from": "/rounding", "path": "/capacity"}]),
        // A model set by a patch is checked at submission; one copied from elsewhere in
        // the document only when applied.
        json!([{"op": "copy", "from": "/capacity", "path": "/pricingModel"}]),
        json!([{"op": "copy", "from": "/rounding", "path": "/pricingModel"}]),
        // A recalculation set by a patch is checked at submission; one copied only when
        // applied.
        json!([{"op": "copy", "from": "/rounding", "path": "/recalculation"}]),
        json!([{"op": "copy", "from": "/capacity", "path": "/schedule"}]),
        json!([{"op": "replace", "path": "", "value": 5}]),
    ];
    for ops in cases {
        let r = t.err(&product_props("P", ops.clone()));
        assert_eq!(r.code, rejection_codes::INVALID_DOCUMENT, "{ops}");
    }
    assert_eq!(t.product("P").properties.capacity, Some(80));
}

// ---------------------------------------------------------------------------------------
// Sales, returns, quantities, reservations.

#[test]
fn sales_and_returns() {
    let mut t = T::standard();
    t.ok(&sale("A", 2, 19.99));
    t.ok(&sale("A", 1, 25.0));
    assert_eq!(t.item("A").sold, 3);
    assert_eq!(revenue(t.item("A")).micros(), 64_980_000);
    t.ok(&sale("A", -1, 19.99));
    assert_eq!(t.item("A").sold, 2);
    assert_eq!(revenue(t.item("A")).micros(), 44_990_000);
    let r = t.err(&sale("A", -3, 19.99));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (rejection_codes::RETURN_EXCEEDS_SOLD, "/data/quantity")
    );
    assert!(
        r.message.contains('3') && r.message.contains('2'),
        "{}",
        r.message
    );
    // The largest return an entry gives (2^53 - 1 units): said with its size.
    let r = t.err(&sale("A", -(MAX_COUNT as i64), 19.99));
    assert_eq!(
        r.message, "a return of 9007199254740991 exceeds the 2 units sold",
        "{}",
        r.message
    );
    t.ok(&sale("A", -2, 19.99));
    assert_eq!(t.item("A").sold, 0);
    assert_eq!(
        t.code(&sale("B", -1, 1.0)),
        pair(rejection_codes::RETURN_EXCEEDS_SOLD, "/data/quantity")
    );
}

#[test]
fn last_sale_time_is_the_latest_of_sold_at_or_timestamp() {
    let mut t = T::standard();
    t.ok(&sale("A", 1, 1.0));
    assert_eq!(t.item("A").last_sale_at, None);
    t.ok(&parse(
        json!({"type": "itemSale", "timestamp": "2026-06-02T00:00:00Z",
        "data": {"itemId": "A", "price": 1}}),
    ));
    assert_eq!(t.item("A").last_sale_at, Some(ts("2026-06-02T00:00:00Z")));
    // soldAt wins over the timestamp; an older sale reported late does not go back.
    t.ok(&parse(
        json!({"type": "itemSale", "timestamp": "2026-06-05T00:00:00Z",
        "data": {"itemId": "A", "price": 1, "soldAt": "2026-06-01T00:00:00Z"}}),
    ));
    assert_eq!(t.item("A").last_sale_at, Some(ts("2026-06-02T00:00:00Z")));
    t.ok(&parse(json!({"type": "itemSale",
        "data": {"itemId": "A", "price": 1, "soldAt": "2026-06-03T00:00:00Z"}})));
    assert_eq!(t.item("A").last_sale_at, Some(ts("2026-06-03T00:00:00Z")));
}

#[test]
fn sales_beyond_quantity_are_not_errors() {
    let mut t = T::standard();
    t.ok(&total("A", 5));
    t.ok(&sale("A", 8, 10.0));
    assert_eq!(t.item_counts("A"), counts(8, 0, 0, 3));
    t.ok(&sale("B", 100, 10.0));
    assert_eq!(t.product_counts("P"), counts(108, 0, 0, 8));
    assert_eq!(t.item_counts("B"), counts(100, 0, 0, 8));
    assert_eq!(t.item_counts("A"), counts(8, 0, 0, 8), "the tighter bound");
}

#[test]
fn pool_sales_consume_item_then_product_reservations() {
    let mut t = T::standard();
    t.ok(&reserve_item("A", 3));
    t.ok(&reserve_product("P", 5));
    assert_eq!(t.product_counts("P"), counts(0, 8, 92, 0));
    let d = t.ok(&pool_sale("A", 2));
    assert_eq!((t.item("A").reserved, t.product("P").reserved), (1, 5));
    assert_eq!(
        d.products,
        BTreeSet::from([product_id("P")]),
        "its sales count"
    );
    let p_seq = t.product("P").seq;
    let d = t.ok(&pool_sale("A", 4));
    assert_eq!((t.item("A").reserved, t.product("P").reserved), (0, 2));
    assert_eq!(d.products, BTreeSet::from([product_id("P")]));
    assert!(t.product("P").seq > p_seq);
    assert_eq!(t.product_counts("P"), counts(6, 2, 92, 0));
    // More than is reserved: the rest is a plain sale.
    t.ok(&pool_sale("A", 10));
    assert_eq!((t.item("A").reserved, t.product("P").reserved), (0, 0));
    assert_eq!(t.item("A").sold, 16);
    assert_eq!(t.product_counts("P"), counts(16, 0, 84, 0));
    // Nothing reserved: nothing to free; the product changes only by its sales count.
    let reserved = t.product("P").reserved;
    t.ok(&pool_sale("B", 1));
    assert_eq!(t.product("P").reserved, reserved);
    // Without pool, reservations stay.
    t.ok(&reserve_item("B", 2));
    t.ok(&reserve_product("P", 2));
    t.ok(&sale("B", 1, 10.0));
    assert_eq!((t.item("B").reserved, t.product("P").reserved), (2, 2));
    // A return does not reserve again.
    t.ok(&pool_sale("B", -1));
    assert_eq!((t.item("B").reserved, t.product("P").reserved), (2, 2));
    // Another item's reservation is not the pool.
    t.ok(&pool_sale("A", 3));
    assert_eq!((t.item("B").reserved, t.product("P").reserved), (2, 0));
}

#[test]
fn item_quantity_is_the_total_in_circulation() {
    let mut t = T::standard();
    t.ok(&sale("A", 4, 10.0));
    t.ok(&reserve_item("A", 3));
    t.ok(&reserve_product("P", 50));
    let r = t.err(&total("A", 6));
    assert_eq!(
        (r.code.as_str(), r.pointer.as_str()),
        (
            rejection_codes::TOTAL_BELOW_SOLD_AND_RESERVED,
            "/data/total"
        )
    );
    assert!(
        r.message.contains("(4)") && r.message.contains("(3)"),
        "{}",
        r.message
    );
    // Equal is allowed; product reservations are not the item's.
    t.ok(&total("A", 7));
    assert_eq!(t.item("A").total, Some(7));
    assert_eq!(t.item_counts("A"), counts(4, 3, 0, 0));
    // Idempotent: the same total again changes nothing but the record's sequence.
    let before = t.item("A").clone();
    t.ok(&total("A", 7));
    assert_eq!(
        ItemState {
            seq: before.seq,
            ..t.item("A").clone()
        },
        before
    );
    t.ok(&total("A", 20));
    assert_eq!(t.item_counts("A"), counts(4, 3, 13, 0));
    // A total may be set to zero when nothing is sold or reserved.
    t.ok(&total("B", 0));
    assert_eq!(t.item_counts("B"), counts(0, 0, 0, 0));
}

#[test]
fn reservations_are_absolute() {
    let mut t = T::standard();
    t.ok(&reserve_item("A", 5));
    t.ok(&reserve_item("A", 5));
    assert_eq!(t.item("A").reserved, 5);
    t.ok(&reserve_item("A", 2));
    assert_eq!(t.item("A").reserved, 2);
    t.ok(&reserve_product("P", 10));
    t.ok(&reserve_product("P", 10));
    assert_eq!(t.product("P").reserved, 10);
    assert_eq!(t.product_counts("P"), counts(0, 12, 88, 0));
    // Reserving more than the total is not an error: it shows as oversold.
    t.ok(&total("B", 4));
    t.ok(&reserve_item("B", 6));
    assert_eq!(t.item_counts("B"), counts(0, 6, 0, 2));
}

// ---------------------------------------------------------------------------------------
// Schedules and deprecated instance actions.

#[test]
fn pricing_schedule_is_kept_in_the_header() {
    let mut t = T::new();
    assert_eq!(t.s.header.schedule, None);
    let d = t.ok(&entry("pricingSchedule", json!({"interval": "PT15M"})));
    assert!(d.header && d.items.is_empty() && d.products.is_empty());
    assert_eq!(t.s.header.schedule, Some(Schedule::IntervalSeconds(900)));
    t.ok(&entry(
        "pricingSchedule",
        json!({"times": ["20:00", "08:00"]}),
    ));
    assert_eq!(
        t.s.header.schedule,
        Some(Schedule::TimesOfDay(vec![480, 1200]))
    );
}

#[test]
fn instance_actions_become_every_window_they_enable() {
    let windows = |actions: Value| {
        let mut t = T::new();
        t.ok(&entry("instanceActions", json!({ "actions": actions })));
        t.s.header.actions_windows
    };
    let at = |d: &str| Some(ts(&format!("2026-06-{d}T00:00:00Z")));
    let enable = |d: &str| json!({"action": "enable", "date": format!("2026-06-{d}T00:00:00Z")});
    let disable = |d: &str| json!({"action": "disable", "date": format!("2026-06-{d}T00:00:00Z")});
    let w = |from, until| ActionsWindow { from, until };
    assert_eq!(
        windows(json!([enable("01"), disable("30")])),
        [w(at("01"), at("30"))]
    );
    // In date order, whatever the order given.
    assert_eq!(
        windows(json!([disable("30"), enable("01")])),
        [w(at("01"), at("30"))]
    );
    assert_eq!(windows(json!([enable("05")])), [w(at("05"), None)]);
    assert_eq!(windows(json!([disable("05")])), [w(None, at("05"))]);
    // Repeats change nothing.
    assert_eq!(
        windows(json!([disable("02"), disable("09")])),
        [w(None, at("02"))]
    );
    assert_eq!(
        windows(json!([enable("01"), enable("10")])),
        [w(at("01"), None)]
    );
    assert_eq!(
        windows(json!([enable("10"), disable("01")])),
        [w(None, at("01")), w(at("10"), None)]
    );
    // Every enable/disable window, not only the last.
    assert_eq!(
        windows(json!([
            enable("01"),
            disable("05"),
            enable("10"),
            disable("20"),
            disable("25")
        ])),
        [w(at("01"), at("05")), w(at("10"), at("20"))]
    );
    // A later entry replaces the windows, and a stored state's single window with them.
    let mut t = T::new();
    t.s.header.actions_window = Some(w(at("01"), None));
    t.ok(&entry(
        "instanceActions",
        json!({ "actions": [enable("07")] }),
    ));
    assert_eq!(t.s.header.actions_window, None);
    assert_eq!(t.s.header.action_windows(), [w(at("07"), None)]);
}

// ---------------------------------------------------------------------------------------
// Counts.

#[test]
fn product_capacity_is_shared_by_its_items() {
    let mut t = T::standard();
    t.ok(&sale("A", 30, 10.0));
    t.ok(&sale("B", 20, 10.0));
    t.ok(&reserve_item("B", 10));
    t.ok(&reserve_product("P", 5));
    assert_eq!(t.product_counts("P"), counts(50, 15, 35, 0));
    assert_eq!(t.item_counts("A"), counts(30, 0, 35, 0));
    assert_eq!(t.item_counts("B"), counts(20, 10, 35, 0));
    // An item total is the tighter bound when it is.
    t.ok(&total("A", 40));
    assert_eq!(t.item_counts("A"), counts(30, 0, 10, 0));
    t.ok(&total("B", 100));
    assert_eq!(t.item_counts("B"), counts(20, 10, 35, 0));
    // Overselling the product: available stays at 0 and oversold shows the excess.
    t.ok(&sale("A", 100, 10.0));
    assert_eq!(t.product_counts("P"), counts(150, 15, 0, 65));
    assert_eq!(t.item_counts("A"), counts(130, 0, 0, 90));
    assert_eq!(t.item_counts("B"), counts(20, 10, 0, 65));
    let totals = t.s.product_totals();
    assert_eq!(
        totals.get(&product_id("P")).copied(),
        Some(ProductTotals {
            sold: 150,
            reserved: 15,
            legacy_capacity: None
        })
    );
}

#[test]
fn items_of_other_products_do_not_share() {
    let mut t = T::standard();
    t.ok(&product("Q", Some(10)));
    t.ok(&item("C", "Q"));
    t.ok(&sale("C", 4, 1.0));
    t.ok(&sale("A", 1, 1.0));
    assert_eq!(t.product_counts("Q"), counts(4, 0, 6, 0));
    assert_eq!(t.product_counts("P"), counts(1, 0, 99, 0));
    assert_eq!(t.item_counts("C"), counts(4, 0, 6, 0));
}

#[test]
fn without_any_capacity_nothing_is_available() {
    let mut t = T::new();
    t.ok(&product("P", None));
    t.ok(&item("A", "P"));
    assert_eq!(t.product_counts("P"), counts(0, 0, 0, 0));
    assert_eq!(t.item_counts("A"), counts(0, 0, 0, 0));
    t.ok(&sale("A", 2, 1.0));
    assert_eq!(t.item_counts("A"), counts(2, 0, 0, 0));
    // An item total alone bounds the item.
    t.ok(&total("A", 10));
    assert_eq!(t.item_counts("A"), counts(2, 0, 8, 0));
    assert_eq!(t.product_counts("P"), counts(2, 0, 0, 0));
}

#[test]
fn legacy_quantities_set_up_a_missing_capacity() {
    let mut t = T::new();
    t.ok(&product("P", None));
    t.ok(&legacy_item("A", "P", 40));
    t.ok(&legacy_item("B", "P", 60));
    t.ok(&item("C", "P"));
    assert_eq!(t.item("A").legacy_quantity, Some(40));
    assert_eq!(t.product_counts("P"), counts(0, 0, 100, 0));
    t.ok(&sale("A", 10, 1.0));
    assert_eq!(t.product_counts("P"), counts(10, 0, 90, 0));
    assert_eq!(t.item_counts("C"), counts(0, 0, 90, 0));
    // A repeat without quantity keeps it; with one, replaces it.
    t.ok(&item("A", "P"));
    assert_eq!(t.item("A").legacy_quantity, Some(40));
    t.ok(&legacy_item("A", "P", 50));
    assert_eq!(t.product_counts("P"), counts(10, 0, 100, 0));
    // Removed items no longer contribute.
    t.ok(&removal("B"));
    assert_eq!(t.product_counts("P"), counts(10, 0, 40, 0));
    // A product capacity wins over legacy quantities.
    t.ok(&product("P", Some(20)));
    assert_eq!(t.product_counts("P"), counts(10, 0, 10, 0));
    let mut t = T::new();
    t.ok(&product("Q", Some(5)));
    t.ok(&legacy_item("D", "Q", 500));
    assert_eq!(t.product_counts("Q"), counts(0, 0, 5, 0));
}

#[test]
fn a_removed_items_units_sold_keep_the_capacity_they_took_and_its_reservations_are_freed() {
    // An early-bird item removed when its phase ends: the tickets it sold are still sold,
    // so its siblings cannot sell those seats again (they used to come back, and the
    // siblings' prices fell as if the venue were empty). What it had reserved can no
    // longer be sold, so it holds nothing.
    let mut t = T::standard();
    t.ok(&sale("A", 30, 1.0));
    t.ok(&reserve_item("A", 5));
    t.ok(&sale("B", 10, 1.0));
    assert_eq!(t.product_counts("P"), counts(40, 5, 55, 0));
    t.ok(&removal("A"));
    assert_eq!(t.product_counts("P"), counts(40, 0, 60, 0));
    let totals = t.s.product_totals();
    assert_eq!(t.s.item_counts(t.item("B"), &totals).available, 60);
    // The removed record keeps its own counts for the audit trail; its counts show what it
    // sold, nothing reserved or left to sell.
    assert_eq!((t.item("A").sold, t.item("A").reserved), (30, 5));
    assert_eq!(t.item_counts("A"), counts(30, 0, 0, 0));
}

#[test]
fn an_item_count_is_exact_or_the_sale_is_refused() {
    // An entry gives at most 2^53 - 1 units: counts at that bound add up exactly.
    let mut t = T::standard();
    t.ok(&reserve_item("A", MAX_COUNT));
    t.ok(&reserve_item("B", MAX_COUNT));
    t.ok(&reserve_product("P", MAX_COUNT));
    t.ok(&sale("A", MAX_COUNT as i64, 0.0));
    let (sold, reserved) = (MAX_COUNT, 3 * MAX_COUNT);
    assert_eq!(
        t.product_counts("P"),
        counts(sold, reserved, 0, sold + reserved - 100)
    );
    // The apply step keeps its own bounds whatever it is given: entries past the
    // parser's bound, as no submitted entry is.
    let huge_sale = |id: &str, price: f64| {
        let mut e = sale(id, 1, price);
        if let EntryKind::ItemSale(s) = &mut e.kind {
            s.quantity = i64::MAX;
        }
        e
    };
    let mut t = T::standard();
    t.ok(&huge_sale("A", 0.0));
    t.ok(&huge_sale("A", 0.0));
    let sold = t.item("A").sold;
    assert_eq!(sold, 2 * (i64::MAX as u64));
    // A third would pass 2^64 - 1 units: refused, the count stays exact.
    assert_eq!(
        t.code(&huge_sale("A", 0.0)),
        pair(rejection_codes::OUT_OF_RANGE, "/data/quantity")
    );
    assert_eq!(t.item("A").sold, sold);
    // Product totals over several items saturate (a sum for display, never stored).
    t.ok(&huge_sale("B", 0.0));
    let mut reserve = reserve_item("B", 1);
    if let EntryKind::ItemReservation { reserved, .. } = &mut reserve.kind {
        *reserved = u64::MAX;
    }
    t.ok(&reserve);
    let c = t.product_counts("P");
    assert_eq!((c.sold, c.reserved, c.available), (u64::MAX, u64::MAX, 0));
    assert!(c.oversold > 0);
    // A revenue past 64-bit micro-units is refused too (`code` checks it changed nothing).
    assert_eq!(
        t.code(&huge_sale("B", 1000.0)),
        pair(rejection_codes::OUT_OF_RANGE, "/data/quantity")
    );
}

// ---------------------------------------------------------------------------------------
// The logged apply and dirty tracking.

#[test]
fn apply_logged_advances_the_sequence_even_on_rejection() {
    let mut s = InstanceState::default();
    let mut dirty = Dirty::default();
    assert!(s.apply_logged(&sale("A", 1, 1.0), 7, &mut dirty).is_err());
    assert_eq!(s.header.applied_seq, 7);
    assert!(dirty.header && dirty.items.is_empty() && dirty.products.is_empty());
    assert_eq!(dirty.record_count(), 1);
    // The unlogged apply leaves the sequence alone.
    let mut dirty = Dirty::default();
    assert!(s.apply(&product("P", Some(1)), 8, &mut dirty).is_ok());
    assert_eq!(s.header.applied_seq, 7);
    assert!(!dirty.header);
    assert_eq!(dirty.record_count(), 1);
    assert!(dirty.registered_products.contains(&product_id("P")));
    // A commit forgets the changed records, not the products the batch registered.
    dirty.clear();
    assert_eq!(dirty.record_count(), 0);
    assert!(!dirty.header && dirty.items.is_empty() && dirty.products.is_empty());
    assert!(dirty.registered_products.contains(&product_id("P")));
    // Registering it again is an update, not a registration.
    let mut dirty = Dirty::default();
    assert!(s.apply(&product("P", Some(2)), 9, &mut dirty).is_ok());
    assert!(dirty.registered_products.is_empty());
}

/// What an entry marks dirty: (header, items, products).
type Marked = (bool, Vec<String>, Vec<String>);

/// What `apply` (without the log's header update) marks dirty.
fn dirty_of(t: &mut T, e: &Entry) -> Marked {
    let mut dirty = Dirty::default();
    let seq = t.next_seq();
    let _ = t.s.apply(e, seq, &mut dirty);
    t.s.header.applied_seq = seq;
    (
        dirty.header,
        dirty.items.iter().map(ToString::to_string).collect(),
        dirty.products.iter().map(ToString::to_string).collect(),
    )
}

#[test]
fn each_kind_marks_exactly_the_records_it_changes() {
    let mut t = T::standard();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cases: Vec<(Entry, Marked)> = vec![
        (product("Q", Some(3)), (false, s(&[]), s(&["Q"]))),
        (item("C", "Q"), (false, s(&["C"]), s(&[]))),
        (item("C", "P"), (false, s(&["C"]), s(&[]))),
        // A sale also counts on its product (the sales per share of the period).
        (sale("A", 2, 1.0), (false, s(&["A"]), s(&["P"]))),
        (sale("A", -1, 1.0), (false, s(&["A"]), s(&["P"]))),
        (total("A", 10), (false, s(&["A"]), s(&[]))),
        (reserve_item("B", 1), (false, s(&["B"]), s(&[]))),
        (reserve_product("P", 4), (false, s(&[]), s(&["P"]))),
        (pool_sale("B", 1), (false, s(&["B"]), s(&["P"]))),
        (pool_sale("B", 2), (false, s(&["B"]), s(&["P"]))),
        (
            meta(json!([{"op": "add", "path": "/name", "value": "x"}])),
            (true, s(&[]), s(&[])),
        ),
        (
            patch(
                "itemMetadata",
                json!({"itemId": "A"}),
                json!([{"op": "add", "path": "/x", "value": 1}]),
            ),
            (false, s(&["A"]), s(&[])),
        ),
        (
            item_props(
                "A",
                json!([{"op": "replace", "path": "/dynamicPricing", "value": false}]),
            ),
            (false, s(&["A"]), s(&[])),
        ),
        (
            patch(
                "productMetadata",
                json!({"productId": "Q"}),
                json!([{"op": "add", "path": "/zone", "value": "N"}]),
            ),
            (false, s(&[]), s(&["Q"])),
        ),
        (
            product_props(
                "Q",
                json!([{"op": "replace", "path": "/capacity", "value": 9}]),
            ),
            (false, s(&[]), s(&["Q"])),
        ),
        (
            entry("pricingSchedule", json!({"interval": "PT5M"})),
            (true, s(&[]), s(&[])),
        ),
        (
            entry(
                "instanceActions",
                json!({"actions": [{"action": "enable", "date": "2026-06-01T00:00:00Z"}]}),
            ),
            (true, s(&[]), s(&[])),
        ),
        (removal("C"), (false, s(&["C"]), s(&[]))),
        // Rejections mark nothing.
        (removal("C"), (false, s(&[]), s(&[]))),
        (sale("X", 1, 1.0), (false, s(&[]), s(&[]))),
        (sale("A", -100, 1.0), (false, s(&[]), s(&[]))),
        (
            meta(json!([{"op": "remove", "path": "/nope"}])),
            (false, s(&[]), s(&[])),
        ),
    ];
    for (e, expected) in cases {
        let name = e.kind.type_name();
        assert_eq!(dirty_of(&mut t, &e), expected, "{name}");
    }
}

#[test]
fn changed_records_carry_the_sequence_of_the_entry() {
    let mut t = T::standard();
    assert_eq!(
        (t.product("P").seq, t.item("A").seq, t.item("B").seq),
        (1, 2, 3)
    );
    t.ok(&sale("B", 1, 1.0));
    assert_eq!(
        (t.product("P").seq, t.item("A").seq, t.item("B").seq),
        (4, 2, 4)
    );
    t.ok(&reserve_product("P", 1));
    assert_eq!(t.product("P").seq, 5);
    t.err(&sale("A", -1, 1.0));
    assert_eq!(t.item("A").seq, 2);
    assert_eq!(t.s.header.applied_seq, 6);
}

#[test]
fn the_state_survives_a_json_round_trip() {
    let mut t = T::standard();
    t.ok(&legacy_item("L", "P", 5));
    t.ok(&entry(
        "productRegistration",
        json!({"productId": "Q", "capacity": 7, "pricingModel": {"type": "tiers", "tiers": [{"multiplier": 1.25}]},
               "recalculation": {"soldPercentStep": 2.5}, "properties": {"note": "n"}, "metadata": {"zone": "Z"}}),
    ));
    t.ok(&item_props(
        "A",
        json!([{"op": "add", "path": "/color", "value": "red"},
               {"op": "replace", "path": "/priceSettings/default", "value": 12.34}]),
    ));
    t.ok(&parse(
        json!({"type": "itemSale", "timestamp": "2026-06-02T10:11:12.345Z",
        "data": {"itemId": "A", "quantity": 3, "price": 0.1}}),
    ));
    t.ok(&reserve_item("B", 2));
    t.ok(&total("B", 9));
    t.ok(&removal("L"));
    t.ok(&meta(
        json!([{"op": "add", "path": "/dates", "value": [main_date()]}]),
    ));
    t.ok(&entry("pricingSchedule", json!({"times": ["10:00"]})));
    t.ok(&entry(
        "instanceActions",
        json!({"actions": [{"action": "enable", "date": "2026-06-01T00:00:00Z"}]}),
    ));
    let text = serde_json::to_string(&t.s).expect("serializable");
    let back: InstanceState = serde_json::from_str(&text).expect("deserializable");
    assert_eq!(back, t.s);
}

// ---------------------------------------------------------------------------------------
// Stored entries that no longer parse (the processor's view).

fn record(sequence: u64, payload: &Value) -> LogRecord {
    LogRecord {
        sequence,
        transaction_id: None,
        received_at: ts("2026-05-19T12:00:00Z"),
        jwt: format!(
            "eyJhbGciOiJFUzI1NiJ9.{}.c2ln",
            URL_SAFE_NO_PAD.encode(payload.to_string())
        ),
    }
}

#[test]
fn stored_entries_that_fail_validation_are_rejected_as_invalid_entries() {
    let mut s = InstanceState::default();
    let mut dirty = Dirty::default();
    let r = apply_record(
        &mut s,
        &record(1, &json!({"type": "instanceDates", "data": {}})),
        &mut dirty,
    )
    .expect_err("a removed kind");
    assert_eq!(r.rejection.code, rejection_codes::INVALID_ENTRY);
    assert_eq!((r.sequence, r.entry_type.as_str()), (1, "unknown"));
    assert_eq!(s.header.applied_seq, 1);
    assert!(dirty.header);
    let mut broken = record(2, &json!({}));
    broken.jwt = "not a jws".into();
    let r = apply_record(&mut s, &broken, &mut dirty).expect_err("not a JWS");
    assert_eq!(r.rejection.code, rejection_codes::INVALID_ENTRY);
    assert_eq!(s.header.applied_seq, 2);
    // A future timestamp is not checked on replay.
    apply_record(
        &mut s,
        &record(
            3,
            &json!({"type": "productRegistration", "timestamp": "2099-01-01T00:00:00Z",
                     "data": {"productId": "P", "capacity": 1}}),
        ),
        &mut dirty,
    )
    .expect("applied");
    // Semantic rejections carry the entry type and transaction id.
    let mut rec = record(
        4,
        &json!({"type": "itemSale", "data": {"itemId": "X", "price": 1}}),
    );
    rec.transaction_id = Some(crate::ids::TransactionId::parse("t-4").expect("valid"));
    let r = apply_record(&mut s, &rec, &mut dirty).expect_err("unknown item");
    assert_eq!(r.entry_type, "itemSale");
    assert_eq!(r.transaction_id.as_deref(), Some("t-4"));
    assert_eq!(r.rejection.code, rejection_codes::UNKNOWN_ITEM);
    assert_eq!(s.header.applied_seq, 4);
}

/// A member named as serde_json reserves (`$serde_json::private::...`; a patch could make
/// one before such names were refused) reads back from a stored record as it was: a
/// product's metadata once failed to decode (its instance never loaded again) and the
/// instance meta came back changed.
#[test]
fn stored_documents_with_a_reserved_member_name_read_back_as_they_were() {
    let odd = json!({"$serde_json::private::RawValue": "[1,2]", "k": 1});
    let map = |v: Value| match v {
        Value::Object(m) => m,
        _ => unreachable!("an object"),
    };
    let mut t = T::new();
    t.ok(&product("P", Some(10)));
    let state = &mut t.s;
    state.header.meta = map(json!({"x": odd.clone()}));
    let p = state
        .products
        .get_mut(&product_id("P"))
        .expect("registered");
    p.metadata = map(json!({"n": odd.clone()}));
    p.properties.extra = map(json!({"pn": odd.clone()}));
    let p = p.clone();
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<ProductState>(&text).unwrap(), p);
    let text = serde_json::to_string(&state.header).unwrap();
    assert_eq!(serde_json::from_str::<Header>(&text).unwrap(), state.header);
}
