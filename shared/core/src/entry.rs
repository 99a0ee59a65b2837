//! Entries: the model of every kind (DESIGN.md section 5) and its syntactic validation.
//!
//! Syntactic = decidable from the entry alone. What depends on the instance's state is
//! checked when the entry is applied (see [`crate::state`]).

use crate::document::{CompactObject, MAX_DOCUMENT_DEPTH, MAX_PATCH_OPERATIONS};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::{ItemId, ProductId, TransactionId};
use crate::money::Money;
use crate::time::{Period, Timestamp, parse_iso_duration};
use crate::validate::{Errors, Obj, codes, escape_token, object};

/// Largest accepted future skew of an entry timestamp.
pub const MAX_FUTURE_SKEW_MS: i64 = 5 * 60 * 1000;

/// The longest `pricingSchedule` interval: 366 days (`P366D`). Longer ones had slots past
/// what the clock holds, and an instance of `P9999999999W` was due at every tick for good
/// and never priced on schedule.
pub const MAX_SCHEDULE_INTERVAL_SECONDS: u64 = 366 * 86_400;

/// One validated entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub transaction_id: Option<TransactionId>,
    pub timestamp: Option<Timestamp>,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EntryKind {
    ProductRegistration(ProductRegistration),
    ItemRegistration(ItemRegistration),
    ItemRemoval {
        item_id: ItemId,
    },
    InstanceMetadata(DocChange),
    ItemMetadata {
        item_id: ItemId,
        change: DocChange,
    },
    ItemProperties {
        item_id: ItemId,
        change: DocChange,
    },
    ProductMetadata {
        product_id: ProductId,
        change: DocChange,
    },
    ProductProperties {
        product_id: ProductId,
        change: DocChange,
    },
    ItemSale(ItemSale),
    ItemQuantity {
        item_id: ItemId,
        total: u64,
    },
    ItemReservation {
        target: ReservationTarget,
        reserved: u64,
    },
    PricingSchedule(Schedule),
    InstanceActions(Vec<InstanceAction>),
}

impl EntryKind {
    /// The wire name of the kind.
    pub fn type_name(&self) -> &'static str {
        match self {
            EntryKind::ProductRegistration(_) => "productRegistration",
            EntryKind::ItemRegistration(_) => "itemRegistration",
            EntryKind::ItemRemoval { .. } => "itemRemoval",
            EntryKind::InstanceMetadata(_) => "instanceMetadata",
            EntryKind::ItemMetadata { .. } => "itemMetadata",
            EntryKind::ItemProperties { .. } => "itemProperties",
            EntryKind::ProductMetadata { .. } => "productMetadata",
            EntryKind::ProductProperties { .. } => "productProperties",
            EntryKind::ItemSale(_) => "itemSale",
            EntryKind::ItemQuantity { .. } => "itemQuantity",
            EntryKind::ItemReservation { .. } => "itemReservation",
            EntryKind::PricingSchedule(_) => "pricingSchedule",
            EntryKind::InstanceActions(_) => "instanceActions",
        }
    }
}

/// A change to a JSON document: an RFC 6902 patch, or the deprecated root-level `update`.
#[derive(Debug, Clone, PartialEq)]
pub enum DocChange {
    Patch(json_patch::Patch),
    /// Deprecated: shallow merge at the root; `null` values remove keys.
    Update(Map<String, Value>),
}

impl DocChange {
    /// Where the change is in its entry, for a rejection to point at.
    pub fn pointer(&self) -> &'static str {
        match self {
            DocChange::Patch(_) => "/data/patch",
            DocChange::Update(_) => "/data/update",
        }
    }

    /// Applies the change to `doc` within the document limits (see [`crate::document`]).
    /// On error `doc` may be partly changed: apply to a copy.
    pub fn apply_to(&self, doc: &mut Value) -> Result<(), crate::document::DocumentError> {
        crate::document::apply_change(doc, self)
    }

    /// [`DocChange::apply_to`], ignoring what touches the top-level fields `ignored` (see
    /// [`crate::document::apply_change_ignoring`]).
    pub fn apply_ignoring(
        &self,
        doc: &mut Value,
        ignored: &[&str],
    ) -> Result<(), crate::document::DocumentError> {
        crate::document::apply_change_ignoring(doc, self, ignored)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceSettings {
    pub min: Money,
    pub max: Money,
    pub default: Money,
    #[serde(default = "one")]
    pub multiplier: f64,
}

fn one() -> f64 {
    1.0
}

/// The pricing model of a product (DESIGN.md section 6); parameters are validated here and
/// interpreted by the pricing engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PricingModel {
    #[serde(rename_all = "camelCase")]
    Pace {
        #[serde(default = "default_sensitivity")]
        sensitivity: f64,
        #[serde(default = "default_curve")]
        curve: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_step_change: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    TimeBased {
        steps: Vec<TimeStep>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_step_change: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    Tiers {
        tiers: Vec<Tier>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_step_change: Option<f64>,
    },
    #[serde(rename_all = "camelCase")]
    Fixed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_step_change: Option<f64>,
    },
    /// Learns demand from the sales and re-solves toward the event (the default).
    #[serde(rename_all = "camelCase")]
    Revenue {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_step_change: Option<f64>,
    },
}

fn default_sensitivity() -> f64 {
    0.5
}
fn default_curve() -> f64 {
    1.5
}

/// A product without `pricingModel` gets the revenue model.
impl Default for PricingModel {
    fn default() -> Self {
        PricingModel::Revenue {
            max_step_change: None,
        }
    }
}

impl PricingModel {
    /// The pace model with its default parameters.
    pub fn pace() -> Self {
        PricingModel::Pace {
            sensitivity: default_sensitivity(),
            curve: default_curve(),
            max_step_change: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeStep {
    pub days_before: f64,
    pub multiplier: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tier {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_sold_percent: Option<f64>,
    pub multiplier: f64,
}

/// The typed view of an item's properties document; serializes to that document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemProps {
    pub sales_period: Period,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_pricing_period: Option<Period>,
    pub dynamic_pricing: bool,
    pub price_settings: PriceSettings,
    /// Client-defined properties beside the known ones (compact: one per item).
    #[serde(flatten)]
    pub extra: CompactObject,
}

/// The typed view of a product's properties document; serializes to that document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductProps {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    pub pricing_model: PricingModel,
    pub expected_sales: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recalculation: Option<Recalculation>,
    pub rounding: Rounding,
    #[serde(flatten, deserialize_with = "crate::document::plain_map")]
    pub extra: Map<String, Value>,
}

/// Sales-based recalculation trigger of a product.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recalculation {
    pub sold_percent_step: f64,
}

/// Price rounding of a product; the step defaults to 0.01.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rounding {
    pub step: Money,
}

impl Default for Rounding {
    fn default() -> Self {
        Rounding {
            step: Money::from_micros(10_000),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProductRegistration {
    pub product_id: ProductId,
    pub props: ProductProps,
    /// Replaces the metadata when given; kept on a repeat without it.
    pub metadata: Option<Map<String, Value>>,
    pub strict: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ItemRegistration {
    pub item_id: ItemId,
    pub product_id: ProductId,
    pub props: ItemProps,
    /// Replaces the metadata when given; kept on a repeat without it.
    pub metadata: Option<Map<String, Value>>,
    /// Deprecated quantity: only sets up a missing product capacity.
    pub legacy_quantity: Option<u64>,
    pub strict: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tax {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vat_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<Money>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakdownLine {
    pub component: String,
    pub amount: Money,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ItemSale {
    pub item_id: ItemId,
    /// Positive for a sale, negative for a return.
    pub quantity: i64,
    pub price: Money,
    pub base_price: Option<Money>,
    pub pool: bool,
    pub currency: Option<String>,
    pub tax: Option<Tax>,
    pub breakdown: Vec<BreakdownLine>,
    pub sold_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationTarget {
    Item(ItemId),
    Product(ProductId),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Schedule {
    /// Every N seconds.
    IntervalSeconds(u64),
    /// At these minutes of the day (0..1440) in the instance time zone.
    TimesOfDay(Vec<u16>),
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::IntervalSeconds(3_600)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ActionKind {
    Enable,
    Disable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceAction {
    pub action: ActionKind,
    pub date: Timestamp,
}

/// Options of syntactic validation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions {
    /// When given, timestamps more than 5 minutes after it are refused (at submission).
    /// Replays of the stored log pass `None`.
    pub now: Option<Timestamp>,
    /// The rules for new entries: a member spelt like a known one (`transactionID`) and a
    /// registration of a `.` or `..` id are refused. Submission sets it, except for a JWS
    /// the service signed itself (a client resubmitting its log: accepted before these
    /// rules); the stored log is read as it was accepted, without them.
    pub plain: bool,
}

/// The members of an entry outside its `data`.
const ENVELOPE_MEMBERS: [&str; 4] = ["type", "transactionId", "timestamp", "data"];

/// Validates one entry at `ptr`. All problems go to `errors`; `None` when there were any.
pub fn parse_entry(v: &Value, ptr: &str, opts: ParseOptions, errors: &mut Errors) -> Option<Entry> {
    let before = errors.len();
    let o = object(v, ptr, errors)?;
    if opts.plain {
        crate::validate::misspelt_members(o.map, &ENVELOPE_MEMBERS, ptr, errors);
        if let Some(Value::Object(data)) = o.get("data") {
            let d = Obj {
                map: data,
                ptr: o.ptr_of("data"),
            };
            let type_name = o.get("type").and_then(Value::as_str);
            match type_name {
                Some("productRegistration") => d.refuse_dot_segment("productId", errors),
                Some("itemRegistration") => d.refuse_dot_segment("itemId", errors),
                _ => {}
            }
            // No two members of one type are spelt alike, so each list is checked alone.
            for known in type_name.map_or([&[][..], &[][..]], data_members) {
                crate::validate::misspelt_members(data, known, &d.ptr, errors);
            }
            misspelt_nested_members(type_name.unwrap_or(""), &d, errors);
        }
    }
    let type_name = o.req_str("type", errors);
    let transaction_id = o.opt_id::<TransactionId>("transactionId", errors);
    let timestamp = o.opt_timestamp("timestamp", errors);
    refuse_future(timestamp, opts.now, o.ptr_of("timestamp"), errors);
    let type_name = type_name?;
    let data = match o.get("data") {
        Some(d) => object(d, &o.ptr_of("data"), errors),
        None => {
            errors.push(o.ptr_of("data"), codes::REQUIRED, "is required");
            None
        }
    };
    let kind = match removed_kind(type_name) {
        Some(replacement) => {
            errors.push(o.ptr_of("type"), codes::REMOVED, replacement);
            None
        }
        None => parse_kind(type_name, &data?, &o, opts.plain, errors),
    };
    let kind = kind?;
    // A sale's own time is read as the entry's (the demand estimate, the last sale), so it
    // has the same bound.
    if let EntryKind::ItemSale(sale) = &kind {
        let ptr = format!("{}/soldAt", o.ptr_of("data"));
        refuse_future(sale.sold_at, opts.now, ptr, errors);
    }
    (errors.len() == before).then_some(Entry {
        transaction_id,
        timestamp,
        kind,
    })
}

/// Records a time more than [`MAX_FUTURE_SKEW_MS`] after `now` (when given: at submission).
fn refuse_future(t: Option<Timestamp>, now: Option<Timestamp>, ptr: String, errors: &mut Errors) {
    if let (Some(t), Some(now)) = (t, now)
        && t.millis() > now.millis() + MAX_FUTURE_SKEW_MS
    {
        errors.push(ptr, codes::FUTURE, "is more than 5 minutes in the future");
    }
}

/// The members of each entry type's `data` that are read (its own, and the properties a
/// registration takes beside them). `data` is lenient about members it does not know, but
/// one of these spelt another way (`Quantity`, `item_id`) is refused as a misspelt envelope
/// member is: ignored, it would take what it says with it (a sale of 5 written `Quantity`
/// counted as a sale of 1).
fn data_members(type_name: &str) -> [&'static [&'static str]; 2] {
    match type_name {
        "productRegistration" => [
            &["productId", "properties", "metadata", "strict"],
            &PRODUCT_PROPERTY_KEYS,
        ],
        "itemRegistration" => [
            &[
                "itemId",
                "productId",
                "properties",
                "metadata",
                "strict",
                "quantity",
            ],
            &ITEM_PROPERTY_KEYS,
        ],
        "itemRemoval" => [&["itemId"], &[]],
        "instanceMetadata" => [&["patch", "update"], &[]],
        "itemMetadata" | "itemProperties" => [&["itemId", "patch", "update"], &[]],
        "productMetadata" | "productProperties" => [&["productId", "patch", "update"], &[]],
        "itemSale" => [
            &[
                "itemId",
                "quantity",
                "price",
                "basePrice",
                "pool",
                "currency",
                "tax",
                "breakdown",
                "soldAt",
            ],
            &[],
        ],
        "itemQuantity" => [&["itemId", "total", "change"], &[]],
        "itemReservation" => [&["itemId", "productId", "reserved"], &[]],
        "pricingSchedule" => [&["interval", "times"], &[]],
        "instanceActions" => [&["actions"], &[]],
        _ => [&[], &[]],
    }
}

/// The same for the objects inside `data` that are read member by member: a sale's `tax`
/// and `breakdown` lines, a quantity's `change`, an item's `priceSettings` and a product's
/// `rounding` (in `data` or its `properties`): `"Multiplier": 2` would price at the
/// default multiplier of 1.
fn misspelt_nested_members(type_name: &str, d: &Obj<'_>, errors: &mut Errors) {
    use crate::validate::misspelt_members;
    let check = |v: Option<&Value>, known: &[&str], ptr: String, errors: &mut Errors| {
        if let Some(Value::Object(map)) = v {
            misspelt_members(map, known, &ptr, errors);
        }
    };
    match type_name {
        "itemSale" => {
            check(
                d.get("tax"),
                &["vatPercent", "amount", "included"],
                d.ptr_of("tax"),
                errors,
            );
            if let Some(Value::Array(lines)) = d.get("breakdown") {
                for (i, line) in lines.iter().enumerate() {
                    let ptr = format!("{}/{i}", d.ptr_of("breakdown"));
                    check(Some(line), &["component", "amount"], ptr, errors);
                }
            }
        }
        "itemQuantity" => check(
            d.get("change"),
            &["absolute", "relative"],
            d.ptr_of("change"),
            errors,
        ),
        "productRegistration" => {
            check(d.get("rounding"), &["step"], d.ptr_of("rounding"), errors);
            if let Some(Value::Object(props)) = d.get("properties") {
                let ptr = format!("{}/rounding", d.ptr_of("properties"));
                check(props.get("rounding"), &["step"], ptr, errors);
            }
        }
        "itemRegistration" => {
            check(
                d.get("priceSettings"),
                &PRICE_SETTINGS_KEYS,
                d.ptr_of("priceSettings"),
                errors,
            );
            if let Some(Value::Object(props)) = d.get("properties") {
                let ptr = format!("{}/priceSettings", d.ptr_of("properties"));
                check(
                    props.get("priceSettings"),
                    &PRICE_SETTINGS_KEYS,
                    ptr,
                    errors,
                );
            }
        }
        _ => {}
    }
}

fn removed_kind(type_name: &str) -> Option<&'static str> {
    match type_name {
        "instanceDates" => Some(
            "the instanceDates entry was removed in 2.0.0: patch /dates with an instanceMetadata entry",
        ),
        "expectedSales" => Some(
            "the expectedSales entry was removed in 2.0.0: set expectedSales (a fraction 0..1) with productRegistration or productProperties",
        ),
        _ => None,
    }
}

/// `plain`: the rules for new entries apply ([`ParseOptions::plain`]).
fn parse_kind(
    type_name: &str,
    d: &Obj<'_>,
    entry: &Obj<'_>,
    plain: bool,
    errors: &mut Errors,
) -> Option<EntryKind> {
    match type_name {
        "productRegistration" => parse_product_registration(d, errors),
        "itemRegistration" => parse_item_registration(d, errors),
        "itemRemoval" => Some(EntryKind::ItemRemoval {
            item_id: d.req_id::<ItemId>("itemId", errors)?,
        }),
        "instanceMetadata" => {
            let change = parse_change(d, DocKind::InstanceMeta, plain, errors)?;
            Some(EntryKind::InstanceMetadata(change))
        }
        "itemMetadata" | "itemProperties" => {
            let item_id = d.req_id::<ItemId>("itemId", errors);
            let doc = if type_name == "itemMetadata" {
                DocKind::Metadata
            } else {
                DocKind::ItemProperties
            };
            let change = parse_change(d, doc, plain, errors);
            let (item_id, change) = (item_id?, change?);
            Some(if type_name == "itemMetadata" {
                EntryKind::ItemMetadata { item_id, change }
            } else {
                EntryKind::ItemProperties { item_id, change }
            })
        }
        "productMetadata" | "productProperties" => {
            let product_id = d.req_id::<ProductId>("productId", errors);
            let doc = if type_name == "productMetadata" {
                DocKind::Metadata
            } else {
                DocKind::ProductProperties
            };
            let change = parse_change(d, doc, plain, errors);
            let (product_id, change) = (product_id?, change?);
            Some(if type_name == "productMetadata" {
                EntryKind::ProductMetadata { product_id, change }
            } else {
                EntryKind::ProductProperties { product_id, change }
            })
        }
        "itemSale" => parse_item_sale(d, errors).map(EntryKind::ItemSale),
        "itemQuantity" => parse_item_quantity(d, errors),
        "itemReservation" => parse_item_reservation(d, errors),
        "pricingSchedule" => parse_schedule(d, plain, errors).map(EntryKind::PricingSchedule),
        "instanceActions" => parse_actions(d, errors).map(EntryKind::InstanceActions),
        other => {
            errors.push(
                entry.ptr_of("type"),
                codes::UNKNOWN_TYPE,
                format!("unknown entry type `{other}`"),
            );
            None
        }
    }
}

fn parse_product_registration(d: &Obj<'_>, errors: &mut Errors) -> Option<EntryKind> {
    let before = errors.len();
    let product_id = d.req_id::<ProductId>("productId", errors);
    // The properties document: client properties overlaid with the typed fields of `data`.
    let mut doc = d.opt_map("properties", errors).unwrap_or_default();
    for key in PRODUCT_PROPERTY_KEYS {
        if let Some(v) = d.get(key) {
            doc.insert(key.to_string(), v.clone());
        }
    }
    let from = errors.len();
    let props = product_props_from_doc(&doc, &d.ptr, errors);
    point_into_properties(
        d,
        &PRODUCT_PROPERTY_KEYS,
        &PRODUCT_PROPERTY_KEYS,
        from,
        errors,
    );
    let metadata = d.opt_map("metadata", errors);
    check_depth_of(d, "metadata", errors);
    check_depth_of(d, "properties", errors);
    let strict = d.opt_bool("strict", errors).unwrap_or(false);
    let (product_id, props) = (product_id?, props?);
    (errors.len() == before).then_some(EntryKind::ProductRegistration(ProductRegistration {
        product_id,
        props,
        metadata,
        strict,
    }))
}

const PRODUCT_PROPERTY_KEYS: [&str; 6] = [
    "capacity",
    "pricingModel",
    "expectedSales",
    "recalculation",
    "rounding",
    "schedule",
];

const ITEM_PROPERTY_KEYS: [&str; 6] = [
    "salesPeriod",
    "dates",
    "dynamicPricingPeriod",
    "dynamicPricing",
    "priceSettings",
    "expectedSales",
];

/// Deprecated item properties that are accepted and ignored (INTERFACE.md: `quantity` since
/// 3.0.0): never stored, and changes to them do nothing. A registration's `quantity` still
/// sets up a missing product capacity (see [`ItemRegistration::legacy_quantity`]).
pub const IGNORED_ITEM_PROPERTIES: &[&str] = &["quantity"];

fn parse_item_registration(d: &Obj<'_>, errors: &mut Errors) -> Option<EntryKind> {
    let before = errors.len();
    let item_id = d.req_id::<ItemId>("itemId", errors);
    let product_id = d.req_id::<ProductId>("productId", errors);
    let mut doc = d.opt_map("properties", errors).unwrap_or_default();
    for key in ITEM_PROPERTY_KEYS {
        if let Some(v) = d.get(key) {
            doc.insert(key.to_string(), v.clone());
        }
    }
    let from = errors.len();
    let props = item_props_from_doc(&doc, &d.ptr, errors);
    // `quantity` of `data` is the legacy field; one in `properties` is checked there.
    let keys: Vec<&str> = ITEM_PROPERTY_KEYS
        .iter()
        .copied()
        .chain(["quantity"])
        .collect();
    point_into_properties(d, &keys, &ITEM_PROPERTY_KEYS, from, errors);
    let metadata = d.opt_map("metadata", errors);
    check_depth_of(d, "metadata", errors);
    check_depth_of(d, "properties", errors);
    // The legacy quantity: in `data`, else where legacy clients kept it, in `properties`.
    let legacy_quantity = match d.get("properties").and_then(Value::as_object) {
        Some(map) if !d.has("quantity") => Obj {
            map,
            ptr: d.ptr_of("properties"),
        }
        .opt_u64("quantity", errors),
        _ => d.opt_u64("quantity", errors),
    };
    let strict = d.opt_bool("strict", errors).unwrap_or(false);
    let (item_id, product_id, props) = (item_id?, product_id?, props?);
    (errors.len() == before).then_some(EntryKind::ItemRegistration(ItemRegistration {
        item_id,
        product_id,
        props,
        metadata,
        legacy_quantity,
        strict,
    }))
}

/// A document given whole (`metadata`, `properties`) must fit the stored depth limit.
fn check_depth_of(d: &Obj<'_>, key: &str, errors: &mut Errors) {
    if let Some(v @ Value::Object(_)) = d.get(key) {
        let depth = crate::document::depth(v);
        if depth > MAX_DOCUMENT_DEPTH {
            errors.push(
                d.ptr_of(key),
                codes::TOO_DEEP,
                format!("is {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}"),
            );
        }
    }
}

/// Errors found since `from` in the fields `keys` that came from `data.properties` (not
/// overlaid from `data`, see `overlaid`) point into `properties`, where the client wrote them.
fn point_into_properties(
    d: &Obj<'_>,
    keys: &[&str],
    overlaid: &[&str],
    from: usize,
    errors: &mut Errors,
) {
    let Some(props) = d.get("properties").and_then(Value::as_object) else {
        return;
    };
    for key in keys {
        if !props.contains_key(*key) || (overlaid.contains(key) && d.has(key)) {
            continue;
        }
        let at = d.ptr_of(key);
        for e in &mut errors.list[from..] {
            if let Some(rest) = e.pointer.strip_prefix(&at)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                e.pointer = format!("{}/properties/{}{rest}", d.ptr, escape_token(key));
            }
        }
    }
}

/// Reads an item properties document (registration fields or a patched document).
/// `ptr` locates the document; errors point into it.
pub fn item_props_from_doc(
    doc: &Map<String, Value>,
    ptr: &str,
    errors: &mut Errors,
) -> Option<ItemProps> {
    let before = errors.len();
    let o = Obj {
        map: doc,
        ptr: ptr.to_owned(),
    };
    o.removed(
        "expectedSales",
        "expectedSales on items was removed in 3.0.0: set it on the product",
        errors,
    );
    let sales_key = if o.has("salesPeriod") {
        "salesPeriod"
    } else {
        "dates"
    };
    let sales_period = if o.has(sales_key) {
        o.opt_period(sales_key, errors)
    } else {
        errors.push(
            o.ptr_of("salesPeriod"),
            codes::REQUIRED,
            "is required (formerly `dates`)",
        );
        None
    };
    let dynamic_pricing_period = o.opt_period("dynamicPricingPeriod", errors);
    let dynamic_pricing = o.opt_bool("dynamicPricing", errors).unwrap_or(true);
    let price_settings = match o.opt_obj("priceSettings", errors) {
        Some(ps) => price_settings(&ps, errors),
        None => {
            if !o.has("priceSettings") {
                errors.push(o.ptr_of("priceSettings"), codes::REQUIRED, "is required");
            }
            None
        }
    };
    let mut extra = doc.clone();
    for key in ITEM_PROPERTY_KEYS.iter().chain(IGNORED_ITEM_PROPERTIES) {
        extra.remove(*key);
    }
    let (sales_period, price_settings) = (sales_period?, price_settings?);
    (errors.len() == before).then(|| ItemProps {
        sales_period,
        dynamic_pricing_period,
        dynamic_pricing,
        price_settings,
        extra: CompactObject::from_map(&extra),
    })
}

fn price_settings(ps: &Obj<'_>, errors: &mut Errors) -> Option<PriceSettings> {
    ps.removed(
        "constantPrice",
        "constantPrice was removed in 3.0.0: set min and max to the same value",
        errors,
    );
    let min = ps.req_money("min", true, errors);
    let max = ps.req_money("max", true, errors);
    let default = ps.req_money("default", true, errors);
    let multiplier = match ps.opt_f64("multiplier", errors) {
        Some(m) if m < 0.0 => {
            errors.push(
                ps.ptr_of("multiplier"),
                codes::RANGE,
                "must not be negative",
            );
            None
        }
        Some(m) => Some(m),
        None if ps.has("multiplier") => None,
        None => Some(1.0),
    };
    let (min, max, default, multiplier) = (min?, max?, default?, multiplier?);
    if min > max {
        errors.push(ps.ptr_of("max"), codes::RANGE, "must not be below min");
        return None;
    }
    if default < min || default > max {
        errors.push(
            ps.ptr_of("default"),
            codes::RANGE,
            "must lie within [min, max]",
        );
        return None;
    }
    Some(PriceSettings {
        min,
        max,
        default,
        multiplier,
    })
}

/// Reads a product properties document.
pub fn product_props_from_doc(
    doc: &Map<String, Value>,
    ptr: &str,
    errors: &mut Errors,
) -> Option<ProductProps> {
    let before = errors.len();
    let o = Obj {
        map: doc,
        ptr: ptr.to_owned(),
    };
    o.removed(
        "schedule",
        "product schedules were removed in 3.0.0: use a pricingSchedule entry for the instance",
        errors,
    );
    let capacity = o.opt_u64("capacity", errors);
    let pricing_model = match o.get("pricingModel") {
        None => Some(PricingModel::default()),
        Some(v) => pricing_model(v, &o.ptr_of("pricingModel"), errors),
    };
    let expected_sales = match o.get("expectedSales") {
        None => Some(1.0),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if (0.0..=1.0).contains(&f) => Some(f),
            Some(f) if f > 1.0 && f.fract() == 0.0 => {
                errors.push(
                    o.ptr_of("expectedSales"),
                    codes::REMOVED,
                    "count-type expectedSales was removed in 3.0.0: give a fraction from 0 to 1.0",
                );
                None
            }
            _ => {
                errors.push(
                    o.ptr_of("expectedSales"),
                    codes::RANGE,
                    "must be a fraction from 0 to 1.0",
                );
                None
            }
        },
        Some(Value::Object(m)) if m.contains_key("count") => {
            errors.push(
                o.ptr_of("expectedSales"),
                codes::REMOVED,
                "count-type expectedSales was removed in 3.0.0: give a fraction from 0 to 1.0",
            );
            None
        }
        Some(_) => {
            errors.push(
                o.ptr_of("expectedSales"),
                codes::TYPE,
                "must be a number from 0 to 1.0",
            );
            None
        }
    };
    let recalculation = o
        .opt_obj("recalculation", errors)
        .and_then(|r| recalculation(&r, errors));
    let rounding = match o.opt_obj("rounding", errors) {
        Some(r) => r
            .get("step")
            .and_then(|v| rounding_step(v, &r.ptr_of("step"), errors)),
        None => None,
    }
    .map(|step| Rounding { step })
    .unwrap_or_default();
    let mut extra = doc.clone();
    for key in PRODUCT_PROPERTY_KEYS {
        extra.remove(key);
    }
    let (pricing_model, expected_sales) = (pricing_model?, expected_sales?);
    (errors.len() == before).then_some(ProductProps {
        capacity,
        pricing_model,
        expected_sales,
        recalculation,
        rounding,
        extra,
    })
}

/// A `rounding.step`: a price (at most 6 decimals) more than 0.
fn rounding_step(v: &Value, ptr: &str, errors: &mut Errors) -> Option<Money> {
    let Some(f) = v.as_f64() else {
        errors.push(ptr, codes::TYPE, "must be a number");
        return None;
    };
    match Money::from_f64(f) {
        Ok(m) if m.micros() > 0 => Some(m),
        Ok(_) => {
            errors.push(ptr, codes::RANGE, "must be positive");
            None
        }
        Err(e) => {
            errors.push(ptr, codes::FORMAT, e.to_string());
            None
        }
    }
}

/// The largest values of a pricing model's parameters: far past any sensible setting, and
/// small enough that the models' arithmetic stays finite (a timeBased step of 1e308 made
/// the interpolation NaN, priced at the item's min).
const MAX_STEP_CHANGE: f64 = 100.0;
const MAX_MODEL_MULTIPLIER: f64 = 1_000.0;
const MAX_SENSITIVITY: f64 = 10.0;
const MAX_CURVE: f64 = 10.0;
const MAX_DAYS_BEFORE: f64 = 36_525.0;

/// The members each model's object reads, and those of its steps and tiers.
fn model_members(type_name: &str) -> &'static [&'static str] {
    match type_name {
        "pace" => &["type", "sensitivity", "curve", "maxStepChange"],
        "timeBased" => &["type", "steps", "maxStepChange"],
        "tiers" => &["type", "tiers", "maxStepChange"],
        _ => &["type", "maxStepChange"],
    }
}

/// Parses and checks a product's `pricingModel` member by member: each error at its own
/// pointer (`.../pricingModel/tiers/1/upToSoldPercent`), and a known member spelt another
/// way (`maxstepchange`, `uptoSoldPercent`) is an `unknownField` naming the one meant:
/// ignored, it would drop a cap or turn a tier into a catch-all.
fn pricing_model(v: &Value, ptr: &str, errors: &mut Errors) -> Option<PricingModel> {
    use crate::validate::misspelt_members;
    let value = match v {
        Value::String(s) => serde_json::json!({ "type": s }),
        Value::Object(_) => v.clone(),
        _ => {
            errors.push(
                ptr,
                codes::TYPE,
                "must be a model name or an object with `type`",
            );
            return None;
        }
    };
    let before = errors.len();
    let model = Obj {
        map: value.as_object()?,
        ptr: ptr.to_owned(),
    };
    let type_name = model
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    misspelt_members(model.map, model_members(type_name), ptr, errors);
    // A number member (null counts as absent, as everywhere in `data`) within its range:
    // (low, low excluded, high).
    let in_range =
        |o: &Obj<'_>, key: &str, (low, open, high): (f64, bool, f64), errors: &mut Errors| {
            let Some(f) = o.opt_f64(key, errors) else {
                return;
            };
            if (open && f <= low) || f < low || f > high {
                let from = if open { "more than" } else { "at least" };
                errors.push(
                    o.ptr_of(key),
                    codes::RANGE,
                    format!("must be {from} {low} and at most {high}"),
                );
            }
        };
    in_range(
        &model,
        "maxStepChange",
        (0.0, true, MAX_STEP_CHANGE),
        errors,
    );
    in_range(&model, "sensitivity", (0.0, false, MAX_SENSITIVITY), errors);
    in_range(&model, "curve", (0.0, true, MAX_CURVE), errors);
    for (list, members) in [
        ("steps", &["daysBefore", "multiplier"][..]),
        ("tiers", &["upToSoldPercent", "multiplier"][..]),
    ] {
        if !model_members(type_name).contains(&list) {
            continue;
        }
        match model.get(list) {
            Some(Value::Array(rows)) if !rows.is_empty() => {
                for (i, row) in rows.iter().enumerate() {
                    let Some(row) = object(row, &format!("{ptr}/{list}/{i}"), errors) else {
                        continue;
                    };
                    misspelt_members(row.map, members, &row.ptr, errors);
                    in_range(
                        &row,
                        "multiplier",
                        (0.0, false, MAX_MODEL_MULTIPLIER),
                        errors,
                    );
                    in_range(&row, "daysBefore", (0.0, false, MAX_DAYS_BEFORE), errors);
                    in_range(&row, "upToSoldPercent", (0.0, false, 100.0), errors);
                    // A tier without upToSoldPercent catches all; the rest are required.
                    for key in members.iter().filter(|k| **k != "upToSoldPercent") {
                        if !row.has(key) {
                            errors.push(row.ptr_of(key), codes::REQUIRED, "is required");
                        }
                    }
                }
            }
            Some(Value::Array(_)) => {
                errors.push(model.ptr_of(list), codes::RANGE, "needs at least one entry")
            }
            Some(_) => errors.push(model.ptr_of(list), codes::TYPE, "must be an array"),
            None => errors.push(model.ptr_of(list), codes::REQUIRED, "is required"),
        }
    }
    if errors.len() > before {
        return None;
    }
    match serde_json::from_value(value) {
        Ok(model) => Some(model),
        Err(e) => {
            errors.push(
                ptr,
                codes::FORMAT,
                format!(
                    "is not a valid pricing model (revenue, pace, timeBased, tiers, fixed): {e}"
                ),
            );
            None
        }
    }
}

/// Which document a change targets; decides the checks on patch values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DocKind {
    InstanceMeta,
    Metadata,
    ItemProperties,
    ProductProperties,
}

fn parse_change(d: &Obj<'_>, kind: DocKind, plain: bool, errors: &mut Errors) -> Option<DocChange> {
    match (d.get("patch"), d.get("update")) {
        (Some(_), Some(_)) => {
            errors.push(
                d.ptr_of("update"),
                codes::CONFLICT,
                "give either patch or update, not both",
            );
            None
        }
        (None, None) => {
            errors.push(
                d.ptr_of("patch"),
                codes::REQUIRED,
                "is required (RFC 6902 JSON Patch operations)",
            );
            None
        }
        (Some(p), None) => {
            let ptr = d.ptr_of("patch");
            let patch: json_patch::Patch = match serde_json::from_value(p.clone()) {
                Ok(patch) => patch,
                Err(e) => {
                    errors.push(
                        ptr,
                        codes::FORMAT,
                        format!("is not a valid JSON Patch: {e}"),
                    );
                    return None;
                }
            };
            if patch.0.len() > MAX_PATCH_OPERATIONS {
                errors.push(
                    ptr,
                    codes::TOO_LARGE,
                    format!(
                        "has {} operations; at most {MAX_PATCH_OPERATIONS}",
                        patch.0.len()
                    ),
                );
                return None;
            }
            let before = errors.len();
            for (i, op) in patch.0.iter().enumerate() {
                let at = errors.len();
                // A member a later operation may still change (`add /recalculation {}`
                // then `add /recalculation/soldPercentStep 5`) is judged whole at
                // processing: the registration's rules apply here only to what stays.
                let later = &patch.0[i + 1..];
                let settled = match top_member(op) {
                    Some(key) => !later.iter().any(|l| touches(l, key)),
                    None => later.is_empty(),
                };
                let at_op = format!("{ptr}/{i}");
                // A rule for new entries: one logged before it (re-read by the processor, a
                // resubmitted signed log, `simulate log`) still applies, and what it makes is
                // read back as it is (`document::PlainValue`).
                if plain && !makes_no_reserved_member(op, &at_op, errors) {
                    continue;
                }
                check_patch_op(op, &at_op, kind, plain && settled, errors);
                // A whole `priceSettings` that stays is what the item will have: it gets
                // the registration's rules (min <= default <= max, all three given).
                if plain
                    && settled
                    && kind == DocKind::ItemProperties
                    && errors.len() == at
                    && let Some(map) = whole_price_settings(op)
                {
                    let obj = Obj {
                        map,
                        ptr: format!("{ptr}/{i}/value"),
                    };
                    price_settings(&obj, errors);
                }
            }
            let mut patch = patch;
            if kind == DocKind::ItemProperties {
                for op in &mut patch.0 {
                    rename_dates(op);
                }
            }
            (errors.len() == before).then_some(DocChange::Patch(patch))
        }
        (None, Some(_)) => {
            let u = d.opt_obj("update", errors)?;
            let before = errors.len();
            // null removes the key; the rules of `meta` are about present values.
            let removes_meta = |v: &Value| v.is_null() && kind == DocKind::InstanceMeta;
            for (k, v) in u.map.iter() {
                let depth = 1 + crate::document::depth(v);
                if depth > MAX_DOCUMENT_DEPTH {
                    errors.push(
                        u.ptr_of(k),
                        codes::TOO_DEEP,
                        format!("would make the document {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}"),
                    );
                }
            }
            for (k, v) in u.map.iter().filter(|(_, v)| !removes_meta(v)) {
                let at = errors.len();
                check_value_at(
                    &format!("/{}", crate::validate::escape_token(k)),
                    v,
                    &u.ptr_of(k),
                    kind,
                    plain,
                    errors,
                );
                // An update replaces the whole `priceSettings`: the registration's rules.
                if plain
                    && kind == DocKind::ItemProperties
                    && k == "priceSettings"
                    && errors.len() == at
                    && let Some(map) = v.as_object()
                {
                    let obj = Obj {
                        map,
                        ptr: u.ptr_of(k),
                    };
                    price_settings(&obj, errors);
                }
            }
            (errors.len() == before).then(|| {
                let mut map = u.map.clone();
                // `dates` is the former name of salesPeriod; salesPeriod wins when both
                // are given (as in a registration).
                if kind == DocKind::ItemProperties
                    && let Some(v) = map.remove("dates")
                    && !map.contains_key("salesPeriod")
                {
                    map.insert("salesPeriod".to_owned(), v);
                }
                DocChange::Update(map)
            })
        }
    }
}

/// `dates` is the former name of an item's salesPeriod and still accepted (INTERFACE.md):
/// an operation on `/dates...` works on `/salesPeriod...` (the stored properties hold
/// salesPeriod only, so `/dates` would be lost).
fn rename_dates(op: &mut json_patch::PatchOperation) {
    use json_patch::PatchOperation as Op;
    use json_patch::jsonptr::PointerBuf;
    let rename = |p: &mut PointerBuf| {
        if let Some((first, rest)) = p.split_front()
            && first.decoded() == "dates"
        {
            *p = PointerBuf::from_tokens(["salesPeriod"]).concat(rest);
        }
    };
    match op {
        Op::Add(a) => rename(&mut a.path),
        Op::Remove(r) => rename(&mut r.path),
        Op::Replace(r) => rename(&mut r.path),
        Op::Test(t) => rename(&mut t.path),
        Op::Move(m) => {
            rename(&mut m.path);
            rename(&mut m.from);
        }
        Op::Copy(c) => {
            rename(&mut c.path);
            rename(&mut c.from);
        }
    }
}

/// A product's `recalculation` (`{soldPercentStep}`, in (0, 100]), by the registration's
/// rules: a patch or an update that sets it is held to them at submission too.
fn recalculation(r: &Obj<'_>, errors: &mut Errors) -> Option<Recalculation> {
    match r.opt_f64("soldPercentStep", errors) {
        Some(s) if s > 0.0 && s <= 100.0 => Some(Recalculation {
            sold_percent_step: s,
        }),
        Some(_) => {
            errors.push(
                r.ptr_of("soldPercentStep"),
                codes::RANGE,
                "must be in (0, 100]",
            );
            None
        }
        None => {
            if !r.has("soldPercentStep") {
                errors.push(r.ptr_of("soldPercentStep"), codes::REQUIRED, "is required");
            }
            None
        }
    }
}

/// The path an `add` or `replace` sets and the value it sets there; `None` for the other
/// operations.
fn set_by(op: &json_patch::PatchOperation) -> Option<(&json_patch::jsonptr::PointerBuf, &Value)> {
    use json_patch::PatchOperation as Op;
    match op {
        Op::Add(a) => Some((&a.path, &a.value)),
        Op::Replace(r) => Some((&r.path, &r.value)),
        _ => None,
    }
}

/// The object an `add` or `replace` of the whole `/priceSettings` sets.
fn whole_price_settings(op: &json_patch::PatchOperation) -> Option<&Map<String, Value>> {
    let (path, value) = set_by(op)?;
    (path.as_str() == "/priceSettings").then(|| value.as_object())?
}

/// The top-level member an `add`, `replace`, `move` or `copy` sets (or sets within); `None`
/// for the whole document or another operation.
fn top_member(op: &json_patch::PatchOperation) -> Option<&str> {
    use json_patch::PatchOperation as Op;
    let path = match op {
        Op::Move(m) => &m.path,
        Op::Copy(c) => &c.path,
        op => set_by(op)?.0,
    };
    path.as_str().strip_prefix('/')?.split('/').next()
}

/// Whether `op` may change the top-level member `key` (or the whole document): a `test`
/// changes nothing. `key` is as the path spells it (escaped).
fn touches(op: &json_patch::PatchOperation, key: &str) -> bool {
    use json_patch::PatchOperation as Op;
    let within = |p: &str| {
        p.is_empty()
            || p.strip_prefix('/')
                .and_then(|rest| rest.strip_prefix(key))
                .is_some_and(|tail| tail.is_empty() || tail.starts_with('/'))
    };
    match op {
        Op::Add(a) => within(a.path.as_str()),
        Op::Remove(r) => within(r.path.as_str()),
        Op::Replace(r) => within(r.path.as_str()),
        Op::Move(m) => within(m.path.as_str()) || within(m.from.as_str()),
        Op::Copy(c) => within(c.path.as_str()),
        Op::Test(_) => false,
    }
}

/// Whether `op` (at `ptr`) makes no member whose name serde_json reserves (see
/// [`crate::document::is_reserved_member`]); says so in `errors` when it does.
fn makes_no_reserved_member(
    op: &json_patch::PatchOperation,
    ptr: &str,
    errors: &mut Errors,
) -> bool {
    use json_patch::PatchOperation as Op;
    // The operations that make a member at `path`.
    let (Op::Add(json_patch::AddOperation { path, .. })
    | Op::Copy(json_patch::CopyOperation { path, .. })
    | Op::Move(json_patch::MoveOperation { path, .. })) = op
    else {
        return true;
    };
    let Some(name) = path
        .tokens()
        .map(|t| t.decoded().into_owned())
        .find(|t| crate::document::is_reserved_member(t))
    else {
        return true;
    };
    errors.push(
        format!("{ptr}/path"),
        codes::FORMAT,
        format!("names the member {}, which is reserved", Value::from(name)),
    );
    false
}

/// Checks what is decidable from a patch operation alone: removed fields, negative prices,
/// unknown date tags, expectedSales out of range.
fn check_patch_op(
    op: &json_patch::PatchOperation,
    ptr: &str,
    kind: DocKind,
    plain: bool,
    errors: &mut Errors,
) {
    let Some((path, value)) = set_by(op) else {
        if plain
            && let json_patch::PatchOperation::Move(json_patch::MoveOperation { path, .. })
            | json_patch::PatchOperation::Copy(json_patch::CopyOperation { path, .. }) = op
        {
            misspelt_target(path.as_str(), kind, &format!("{ptr}/path"), errors);
        }
        return;
    };
    let depth = crate::document::depth_at(path, value);
    if depth > MAX_DOCUMENT_DEPTH {
        errors.push(
            format!("{ptr}/value"),
            codes::TOO_DEEP,
            format!("would make the document {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}"),
        );
        return;
    }
    check_value_at(
        path.as_str(),
        value,
        &format!("{ptr}/value"),
        kind,
        plain,
        errors,
    );
}

/// A `move` or `copy` onto a misspelt member of `priceSettings`, `rounding` or
/// `recalculation` (`/priceSettings/Default`): the value is known only when the patch runs,
/// but the name is refused here as an `add` of it is.
fn misspelt_target(path: &str, kind: DocKind, ptr: &str, errors: &mut Errors) {
    let tokens: Vec<&str> = path.split('/').skip(1).collect();
    let (key, known): (&str, &[&str]) = match (kind, tokens.as_slice()) {
        (DocKind::ItemProperties, ["priceSettings", key]) => (key, &PRICE_SETTINGS_KEYS),
        (DocKind::ProductProperties, ["rounding", key]) => (key, &["step"]),
        (DocKind::ProductProperties, ["recalculation", key]) => (key, &["soldPercentStep"]),
        _ => return,
    };
    crate::validate::misspelt_member(key, known, ptr, errors);
}

/// Checks `value` placed at document `path` (a JSON Pointer into the target document).
/// `plain`: the rules for new entries apply too (a model, a rounding or a recalculation is
/// held to the registration's rules: [`ParseOptions::plain`]).
fn check_value_at(
    path: &str,
    value: &Value,
    ptr: &str,
    kind: DocKind,
    plain: bool,
    errors: &mut Errors,
) {
    let tokens: Vec<&str> = path.split('/').skip(1).collect();
    match kind {
        DocKind::InstanceMeta => check_meta_value(&tokens, value, ptr, errors),
        DocKind::ItemProperties => match tokens.as_slice() {
            // The whole document: its checked fields are checked inside it.
            [] => {
                if let Some(map) = value.as_object() {
                    for key in ["expectedSales", "priceSettings", "dynamicPricing"] {
                        if let Some(v) = map.get(key) {
                            check_value_at(&format!("/{key}"), v, &format!("{ptr}/{key}"), kind, plain, errors);
                        }
                    }
                }
            }
            ["priceSettings"] => {
                if let Some(map) = value.as_object() {
                    // As in a registration: `"Default": 60` would be kept and never read.
                    if plain {
                        crate::validate::misspelt_members(map, &PRICE_SETTINGS_KEYS, ptr, errors);
                    }
                    price_settings_partial(map, ptr, plain, errors);
                }
            }
            ["priceSettings", "constantPrice"] => errors.push(
                ptr,
                codes::REMOVED,
                "constantPrice was removed in 3.0.0: set min and max to the same value",
            ),
            ["priceSettings", key] if PRICE_SETTINGS_KEYS.contains(key) => {
                price_setting(key, value, ptr, plain, errors)
            }
            ["priceSettings", key] if plain => {
                crate::validate::misspelt_member(key, &PRICE_SETTINGS_KEYS, ptr, errors)
            }
            // The registration's type (found later, it was an `invalidDocument` rejection
            // at processing); null is absent, as in a registration.
            ["dynamicPricing"] if plain && !value.is_null() && !value.is_boolean() => {
                errors.push(ptr, codes::TYPE, "must be a boolean")
            }
            ["expectedSales"] => errors.push(
                ptr,
                codes::REMOVED,
                "expectedSales on items was removed in 3.0.0: set it on the product",
            ),
            _ => {}
        },
        DocKind::ProductProperties => match tokens.as_slice() {
            // The whole document: its checked fields are checked inside it.
            [] => {
                if let Some(map) = value.as_object() {
                    for key in ["schedule", "expectedSales", "capacity", "pricingModel", "rounding", "recalculation"] {
                        if let Some(v) = map.get(key) {
                            check_value_at(&format!("/{key}"), v, &format!("{ptr}/{key}"), kind, plain, errors);
                        }
                    }
                }
            }
            ["schedule"] => errors.push(
                ptr,
                codes::REMOVED,
                "product schedules were removed in 3.0.0: use a pricingSchedule entry for the instance",
            ),
            // The registration's rules (found later, they were `invalidDocument`
            // rejections at processing); null unsets the model.
            ["pricingModel"] if plain && !value.is_null() => {
                pricing_model(value, ptr, errors);
            }
            ["rounding"] if plain => match value {
                Value::Object(map) => {
                    crate::validate::misspelt_members(map, &["step"], ptr, errors);
                    if let Some(step) = map.get("step") {
                        rounding_step(step, &format!("{ptr}/step"), errors);
                    }
                }
                Value::Null => {}
                _ => errors.push(ptr, codes::TYPE, "must be an object"),
            },
            ["rounding", "step"] if plain => {
                rounding_step(value, ptr, errors);
            }
            ["rounding", key] if plain => {
                crate::validate::misspelt_member(key, &["step"], ptr, errors)
            }
            ["recalculation"] if plain => match value {
                Value::Object(map) => {
                    crate::validate::misspelt_members(map, &["soldPercentStep"], ptr, errors);
                    let obj = Obj {
                        map,
                        ptr: ptr.to_owned(),
                    };
                    recalculation(&obj, errors);
                }
                Value::Null => {}
                _ => errors.push(ptr, codes::TYPE, "must be an object"),
            },
            ["recalculation", "soldPercentStep"] if plain => match value.as_f64() {
                Some(s) if s > 0.0 && s <= 100.0 => {}
                Some(_) => errors.push(ptr, codes::RANGE, "must be in (0, 100]"),
                None => errors.push(ptr, codes::TYPE, "must be a number"),
            },
            ["recalculation", key] if plain => {
                crate::validate::misspelt_member(key, &["soldPercentStep"], ptr, errors)
            }
            ["expectedSales"] => match value.as_f64() {
                Some(f) if (0.0..=1.0).contains(&f) => {}
                Some(f) if f > 1.0 && f.fract() == 0.0 => errors.push(
                    ptr,
                    codes::REMOVED,
                    "count-type expectedSales was removed in 3.0.0: give a fraction from 0 to 1.0",
                ),
                _ => errors.push(ptr, codes::RANGE, "must be a fraction from 0 to 1.0"),
            },
            // The registration's rule; null unsets the capacity.
            ["capacity"] => match value {
                Value::Null => {}
                v if crate::validate::past_max_count(v, false) => {
                    crate::validate::too_many(ptr.to_owned(), false, errors)
                }
                v if crate::validate::non_negative_integer(v).is_some() => {}
                Value::Number(_) => errors.push(ptr, codes::RANGE, "must be a non-negative integer"),
                other => errors.push(
                    ptr,
                    codes::TYPE,
                    format!(
                        "must be a non-negative integer or null, got {}",
                        crate::validate::type_name(other)
                    ),
                ),
            },
            _ => {}
        },
        DocKind::Metadata => {}
    }
}

/// The members of `priceSettings`.
const PRICE_SETTINGS_KEYS: [&str; 4] = ["min", "max", "default", "multiplier"];

/// Partial checks on a priceSettings fragment: removed fields, and each member's own
/// rules ([`price_setting`]).
fn price_settings_partial(map: &Map<String, Value>, ptr: &str, plain: bool, errors: &mut Errors) {
    let ps = Obj {
        map,
        ptr: ptr.to_owned(),
    };
    ps.removed(
        "constantPrice",
        "constantPrice was removed in 3.0.0: set min and max to the same value",
        errors,
    );
    for key in PRICE_SETTINGS_KEYS {
        if let Some(v) = ps.get(key) {
            price_setting(key, v, &ps.ptr_of(key), plain, errors);
        }
    }
}

/// The checks a registration makes on a `priceSettings` member that a patch or an update
/// can make at submission too: not negative, and a price (`min`, `max`, `default`) with at
/// most 6 decimals (the registration's rule; found later, it was an `invalidDocument`
/// rejection at processing); with `plain` (a new entry), a number (null is absent).
fn price_setting(key: &str, value: &Value, ptr: &str, plain: bool, errors: &mut Errors) {
    let Some(f) = value.as_f64() else {
        if plain && !value.is_null() {
            errors.push(
                ptr,
                codes::TYPE,
                format!(
                    "must be a number, got {}",
                    crate::validate::type_name(value)
                ),
            );
        }
        return;
    };
    if f < 0.0 {
        errors.push(ptr, codes::RANGE, "must not be negative");
    } else if key != "multiplier"
        && let Err(e) = Money::from_f64(f)
    {
        errors.push(ptr, codes::FORMAT, e.to_string());
    }
}

fn check_meta_value(tokens: &[&str], value: &Value, ptr: &str, errors: &mut Errors) {
    match tokens {
        [] => {
            crate::meta::check_instance_meta(value, ptr, errors);
        }
        ["dates"] => crate::meta::check_dates(value, ptr, errors),
        ["dates", _] => crate::meta::check_date_entry(value, ptr, errors),
        ["dates", _, "tags"] => crate::meta::check_tags(value, ptr, errors),
        ["dates", _, "tags", _] => crate::meta::check_tag(value, ptr, errors),
        ["location"] => crate::meta::check_location(value, ptr, errors),
        _ => {}
    }
}

fn parse_item_sale(d: &Obj<'_>, errors: &mut Errors) -> Option<ItemSale> {
    let before = errors.len();
    let item_id = d.req_id::<ItemId>("itemId", errors);
    let quantity = match d.get("quantity") {
        None => Some(1),
        Some(_) => match d.opt_i64("quantity", errors) {
            Some(0) => {
                errors.push(
                    d.ptr_of("quantity"),
                    codes::RANGE,
                    "must not be 0 (negative = return)",
                );
                None
            }
            other => other,
        },
    };
    let price = d.req_money("price", true, errors);
    let base_price = d.opt_money("basePrice", true, errors);
    let pool = d.opt_bool("pool", errors).unwrap_or(false);
    let currency = d.opt_str("currency", errors).and_then(|c| {
        if c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()) {
            Some(c.to_owned())
        } else {
            errors.push(
                d.ptr_of("currency"),
                codes::FORMAT,
                "must be an ISO 4217 code such as EUR",
            );
            None
        }
    });
    let tax = d.opt_obj("tax", errors).map(|t| {
        let vat_percent = match t.opt_f64("vatPercent", errors) {
            Some(v) if !(0.0..=100.0).contains(&v) => {
                errors.push(
                    t.ptr_of("vatPercent"),
                    codes::RANGE,
                    "must be from 0 to 100",
                );
                None
            }
            other => other,
        };
        let amount = t.opt_money("amount", true, errors);
        let included = t.opt_bool("included", errors);
        Tax {
            vat_percent,
            amount,
            included,
        }
    });
    let mut breakdown = Vec::new();
    if let Some(lines) = d.opt_array("breakdown", errors) {
        if lines.len() > 100 {
            errors.push(d.ptr_of("breakdown"), codes::TOO_LARGE, "at most 100 lines");
        }
        for (i, line) in lines.iter().enumerate() {
            let Some(l) = object(line, &format!("{}/{i}", d.ptr_of("breakdown")), errors) else {
                continue;
            };
            let component = l.req_str("component", errors).and_then(|c| {
                if c.is_empty() || c.chars().count() > 128 {
                    errors.push(
                        l.ptr_of("component"),
                        codes::FORMAT,
                        "must be 1 to 128 characters",
                    );
                    None
                } else {
                    Some(c.to_owned())
                }
            });
            let amount = l.req_money("amount", false, errors);
            if let (Some(component), Some(amount)) = (component, amount) {
                breakdown.push(BreakdownLine { component, amount });
            }
        }
    }
    let sold_at = d.opt_timestamp("soldAt", errors);
    let (item_id, quantity, price) = (item_id?, quantity?, price?);
    (errors.len() == before).then_some(ItemSale {
        item_id,
        quantity,
        price,
        base_price,
        pool,
        currency,
        tax,
        breakdown,
        sold_at,
    })
}

fn parse_item_quantity(d: &Obj<'_>, errors: &mut Errors) -> Option<EntryKind> {
    let item_id = d.req_id::<ItemId>("itemId", errors);
    let total = match d.opt_obj("change", errors) {
        Some(change) => {
            change.removed(
                "relative",
                "change.relative was removed: give the idempotent total in circulation as `total`",
                errors,
            );
            if d.has("total") {
                errors.push(
                    change.ptr.clone(),
                    codes::CONFLICT,
                    "give either total or change.absolute",
                );
                None
            } else if change.has("relative") {
                None
            } else {
                change.req_u64("absolute", errors)
            }
        }
        // `change` is there but not an object: already reported.
        None if d.has("change") => None,
        None => d.req_u64("total", errors),
    };
    Some(EntryKind::ItemQuantity {
        item_id: item_id?,
        total: total?,
    })
}

fn parse_item_reservation(d: &Obj<'_>, errors: &mut Errors) -> Option<EntryKind> {
    let target = match (d.has("itemId"), d.has("productId")) {
        (true, true) => {
            errors.push(
                d.ptr_of("productId"),
                codes::CONFLICT,
                "give either itemId or productId, not both",
            );
            None
        }
        (false, false) => {
            errors.push(
                d.ptr_of("itemId"),
                codes::REQUIRED,
                "itemId or productId is required",
            );
            None
        }
        (true, false) => d
            .opt_id::<ItemId>("itemId", errors)
            .map(ReservationTarget::Item),
        (false, true) => d
            .opt_id::<ProductId>("productId", errors)
            .map(ReservationTarget::Product),
    };
    let reserved = d.req_u64("reserved", errors);
    Some(EntryKind::ItemReservation {
        target: target?,
        reserved: reserved?,
    })
}

fn parse_schedule(d: &Obj<'_>, plain: bool, errors: &mut Errors) -> Option<Schedule> {
    d.removed(
        "productId",
        "product schedules were removed in 3.0.0: the pricingSchedule applies to the instance",
        errors,
    );
    match (d.get("interval"), d.get("times")) {
        (Some(_), Some(_)) => {
            errors.push(
                d.ptr_of("times"),
                codes::CONFLICT,
                "give either interval or times, not both",
            );
            None
        }
        (None, None) => {
            errors.push(
                d.ptr_of("interval"),
                codes::REQUIRED,
                "interval or times is required",
            );
            None
        }
        (Some(_), None) => {
            let s = d.opt_str("interval", errors)?;
            match parse_iso_duration(s) {
                // An entry accepted before the longest interval was a rule is read as it
                // was (the scheduler reads it as the longest).
                Some(secs) if secs >= 60 && (secs <= MAX_SCHEDULE_INTERVAL_SECONDS || !plain) => {
                    Some(Schedule::IntervalSeconds(secs))
                }
                Some(_) => {
                    errors.push(
                        d.ptr_of("interval"),
                        codes::RANGE,
                        "must be at least PT1M and at most P366D",
                    );
                    None
                }
                None => {
                    // Years and months are ISO 8601 too, but of no fixed length.
                    let calendar = s
                        .strip_prefix('P')
                        .and_then(|r| r.split('T').next())
                        .is_some_and(|date| date.contains(['Y', 'M']));
                    let message = if calendar {
                        "years and months have no fixed length: give the interval in weeks, \
                         days, hours or minutes (P30D, PT15M)"
                    } else {
                        "must be an ISO 8601 duration such as PT15M"
                    };
                    errors.push(d.ptr_of("interval"), codes::FORMAT, message);
                    None
                }
            }
        }
        (None, Some(_)) => {
            let before = errors.len();
            let times = d.opt_array("times", errors)?;
            if times.is_empty() || times.len() > 1440 {
                errors.push(d.ptr_of("times"), codes::RANGE, "must hold 1 to 1440 times");
                return None;
            }
            let mut out = Vec::with_capacity(times.len());
            for (i, t) in times.iter().enumerate() {
                match t.as_str().and_then(parse_hh_mm) {
                    Some(m) => out.push(m),
                    None => errors.push(
                        format!("{}/{i}", d.ptr_of("times")),
                        codes::FORMAT,
                        "must be a time of day HH:MM",
                    ),
                }
            }
            out.sort_unstable();
            out.dedup();
            (out.len() <= times.len() && !out.is_empty() && errors.len() == before)
                .then_some(Schedule::TimesOfDay(out))
        }
    }
}

fn parse_hh_mm(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    let digits = |t: &str| t.len() == 2 && t.bytes().all(|b| b.is_ascii_digit());
    if !(digits(h) && digits(m)) {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

fn parse_actions(d: &Obj<'_>, errors: &mut Errors) -> Option<Vec<InstanceAction>> {
    let list = match d.opt_array("actions", errors) {
        Some(l) => l,
        None => {
            if !d.has("actions") {
                errors.push(d.ptr_of("actions"), codes::REQUIRED, "is required");
            }
            return None;
        }
    };
    if list.is_empty() || list.len() > 100 {
        errors.push(
            d.ptr_of("actions"),
            codes::RANGE,
            "must hold 1 to 100 actions",
        );
        return None;
    }
    let before = errors.len();
    let mut out = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let Some(a) = object(a, &format!("{}/{i}", d.ptr_of("actions")), errors) else {
            continue;
        };
        let action = match a.req_str("action", errors) {
            Some("enable") => Some(ActionKind::Enable),
            Some("disable") => Some(ActionKind::Disable),
            Some(_) => {
                errors.push(
                    a.ptr_of("action"),
                    codes::FORMAT,
                    "must be enable or disable",
                );
                None
            }
            None => None,
        };
        let date = a.req_timestamp("date", errors);
        if let (Some(action), Some(date)) = (action, date) {
            out.push(InstanceAction { action, date });
        }
    }
    (errors.len() == before).then_some(out)
}

#[cfg(test)]
mod tests;
