//! The state of an instance as a fold over its entry log, and the apply step (semantic
//! validation). Pure: no I/O, deterministic.
//!
//! State is kept as records (header, one per item, one per product) so that stores can
//! persist only what an entry touched (DynamoDB items are limited to 400 KB each).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::entry::{
    ActionKind, DocChange, Entry, EntryKind, IGNORED_ITEM_PROPERTIES, InstanceAction, ItemProps,
    ItemRegistration, ProductProps, ReservationTarget, Schedule, item_props_from_doc,
    product_props_from_doc,
};
use crate::ids::{ItemId, ProductId};
use crate::money::Money;
use crate::pricing::demand::{ProductSales, SalesStats};
use crate::pricing::revenue::{record_product_sale, record_sale};
use crate::time::Timestamp;
use crate::validate::Errors;

use crate::document::{CompactObject, DocumentError};
pub use crate::document::{MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH};

/// Instance-wide state written by the entry processor.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// The instance `meta` document (dates, location, ...).
    #[serde(deserialize_with = "crate::document::plain_map")]
    pub meta: Map<String, Value>,
    /// Sequence of the last log entry applied (0 = none).
    pub applied_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Scheduled-pricing windows from the last deprecated instanceActions entry: each
    /// enable until the next disable, in date order (DESIGN.md: they become the
    /// dynamicPricingPeriods of the items without their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions_windows: Vec<ActionsWindow>,
    /// The one window states stored before `actions_windows` kept (read, never written:
    /// the next instanceActions entry replaces it).
    #[serde(default, skip_serializing)]
    pub actions_window: Option<ActionsWindow>,
    /// The applied sequence of the run whose sales crossed a trigger's step, committed with
    /// it and kept until a later run knows its calculation was asked for: a request lost
    /// between the commit and the queue is asked for again (the calculation id names the
    /// sequence, so asking twice calculates once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sales_calculation_due: Option<u64>,
}

impl Header {
    /// The instanceActions windows in force (none: no instanceActions entry).
    pub fn action_windows(&self) -> &[ActionsWindow] {
        match (&self.actions_window, self.actions_windows.is_empty()) {
            (Some(legacy), true) => std::slice::from_ref(legacy),
            _ => &self.actions_windows,
        }
    }
}

/// A possibly open-ended window; applies to items without their own dynamicPricingPeriod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionsWindow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemState {
    pub item_id: ItemId,
    pub product_id: ProductId,
    pub properties: ItemProps,
    /// Compact: the engine never reads it, and an instance may hold 100,000 items.
    pub metadata: CompactObject,
    /// Net units sold (sales minus returns); never negative.
    pub sold: u64,
    /// Units reserved on this item.
    pub reserved: u64,
    /// Total in circulation from itemQuantity, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Deprecated registration quantity: sets up a missing product capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_quantity: Option<u64>,
    /// Net revenue in millionths.
    pub revenue_micros: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sale_at: Option<Timestamp>,
    /// What demand estimation needs of the sales (see `pricing::demand`).
    #[serde(default, skip_serializing_if = "SalesStats::is_empty")]
    pub demand: SalesStats,
    pub removed: bool,
    /// Sequence of the last entry that changed this record.
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductState {
    pub product_id: ProductId,
    pub properties: ProductProps,
    #[serde(deserialize_with = "crate::document::plain_map")]
    pub metadata: Map<String, Value>,
    /// Product-level reservation.
    pub reserved: u64,
    /// The product's sales per share of the period, for the booking curves that later
    /// instances of the project learn (see `pricing::demand`).
    #[serde(default, skip_serializing_if = "ProductSales::is_empty")]
    pub demand: ProductSales,
    pub seq: u64,
}

/// The whole derived state of an instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceState {
    pub header: Header,
    pub items: BTreeMap<ItemId, ItemState>,
    pub products: BTreeMap<ProductId, ProductState>,
}

/// The records changed since the last commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirty {
    pub header: bool,
    pub items: BTreeSet<ItemId>,
    pub products: BTreeSet<ProductId>,
    /// The products registered since this `Dirty` was made: kept across [`Dirty::clear`],
    /// since they describe the whole batch (its sales triggers count them from nothing
    /// sold), not the next commit.
    pub registered_products: BTreeSet<ProductId>,
    /// The products whose sales trigger (`recalculation`) was turned on since this `Dirty`
    /// was made (by a registration or a properties change), with the units their items'
    /// sales and returns added since the last time it was: kept across [`Dirty::clear`]
    /// like `registered_products`, so that a crossing counts from what the product had sold
    /// when its trigger came, and only a sale after it fires it. `None` once an item left
    /// the product after it (removed, or moved to another product): its units cannot be
    /// told apart, and the batch does not fire that trigger.
    pub triggers_on: BTreeMap<ProductId, Option<i128>>,
}

impl Dirty {
    pub fn record_count(&self) -> usize {
        usize::from(self.header) + self.items.len() + self.products.len()
    }

    /// Forgets the records changed, once they are committed.
    pub fn clear(&mut self) {
        self.header = false;
        self.items.clear();
        self.products.clear();
    }
}

/// A semantic error: the entry is valid on its own but cannot be applied to this state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub code: String,
    pub message: String,
    /// JSON Pointer into the entry.
    pub pointer: String,
}

fn reject(code: &str, pointer: &str, message: impl Into<String>) -> Rejection {
    Rejection {
        code: code.to_owned(),
        message: message.into(),
        pointer: pointer.to_owned(),
    }
}

/// Codes of [`Rejection::code`].
pub mod rejection_codes {
    pub const UNKNOWN_PRODUCT: &str = "unknownProduct";
    pub const UNKNOWN_ITEM: &str = "unknownItem";
    pub const ALREADY_REGISTERED: &str = "alreadyRegistered";
    pub const ITEM_REMOVED: &str = "itemRemoved";
    pub const PATCH_FAILED: &str = "patchFailed";
    pub const INVALID_DOCUMENT: &str = "invalidDocument";
    pub const DOCUMENT_TOO_LARGE: &str = "documentTooLarge";
    pub const DOCUMENT_TOO_DEEP: &str = "documentTooDeep";
    /// Too many operations, or a patch that copies more than its budget.
    pub const PATCH_TOO_LARGE: &str = "patchTooLarge";
    pub const TOTAL_BELOW_SOLD_AND_RESERVED: &str = "totalBelowSoldAndReserved";
    pub const RETURN_EXCEEDS_SOLD: &str = "returnExceedsSold";
    /// A sale that would take the item's sold count past 2^64 - 1 units, or its revenue
    /// past what a 64-bit count of micro-units holds (about 9.2 trillion): refused rather
    /// than counted inexactly.
    pub const OUT_OF_RANGE: &str = "outOfRange";
    pub const INVALID_ENTRY: &str = "invalidEntry";
}
use rejection_codes as rc;

/// Counts of an item or product as shown in summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sold: u64,
    pub reserved: u64,
    pub available: u64,
    pub oversold: u64,
}

/// Per-product aggregates over its items (a removed item's units sold only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProductTotals {
    pub sold: u64,
    /// Item reservations plus the product reservation.
    pub reserved: u64,
    pub legacy_capacity: Option<u64>,
}

impl InstanceState {
    /// Applies one logged entry: on success the touched records are marked dirty; on
    /// rejection nothing but the applied sequence changes. Either way `applied_seq = seq`.
    pub fn apply_logged(
        &mut self,
        entry: &Entry,
        seq: u64,
        dirty: &mut Dirty,
    ) -> Result<(), Rejection> {
        let result = self.apply(entry, seq, dirty);
        self.header.applied_seq = seq;
        dirty.header = true;
        result
    }

    /// The apply step: all or nothing for one entry.
    pub fn apply(&mut self, entry: &Entry, seq: u64, dirty: &mut Dirty) -> Result<(), Rejection> {
        let product = match &entry.kind {
            EntryKind::ProductRegistration(r) => &r.product_id,
            EntryKind::ProductProperties { product_id, .. } => product_id,
            EntryKind::ItemSale(sale) if !dirty.triggers_on.is_empty() => {
                // A sale of a product whose trigger the batch turned on counts from then.
                let before = self.items.get(&sale.item_id).map(|i| i.sold);
                self.apply_kind(entry, seq, dirty)?;
                if let Some(item) = self.items.get(&sale.item_id)
                    && let Some(Some(since)) = dirty.triggers_on.get_mut(&item.product_id)
                {
                    *since += i128::from(item.sold) - i128::from(before.unwrap_or(0));
                }
                return Ok(());
            }
            EntryKind::ItemRemoval { item_id }
            | EntryKind::ItemRegistration(ItemRegistration { item_id, .. })
                if !dirty.triggers_on.is_empty() =>
            {
                // An item moved to another product whose trigger the batch turned on takes
                // units the count cannot tell apart: the batch does not fire that trigger.
                // (A removed item's units sold stay its product's.)
                let from = self.items.get(item_id).map(|i| i.product_id.clone());
                self.apply_kind(entry, seq, dirty)?;
                let stays = |i: &ItemState| Some(&i.product_id) == from.as_ref();
                if let Some(from) = from.as_ref()
                    && !self.items.get(item_id).is_some_and(stays)
                    && let Some(Some(_)) = dirty.triggers_on.get(from)
                {
                    dirty.triggers_on.insert(from.clone(), None);
                }
                return Ok(());
            }
            _ => return self.apply_kind(entry, seq, dirty),
        };
        let has_trigger = |state: &Self| {
            state
                .products
                .get(product)
                .is_some_and(|p| p.properties.recalculation.is_some())
        };
        let had_trigger = has_trigger(self);
        self.apply_kind(entry, seq, dirty)?;
        if has_trigger(self) && !had_trigger {
            dirty.triggers_on.insert(product.clone(), Some(0));
        }
        Ok(())
    }

    fn apply_kind(&mut self, entry: &Entry, seq: u64, dirty: &mut Dirty) -> Result<(), Rejection> {
        match &entry.kind {
            EntryKind::ProductRegistration(r) => {
                if let Some(m) = &r.metadata {
                    checked_document(m, "/data/metadata")?;
                }
                checked_document(&props_document(&r.props), "/data/properties")?;
                if let Some(existing) = self.products.get_mut(&r.product_id) {
                    if r.strict {
                        return Err(reject(
                            rc::ALREADY_REGISTERED,
                            "/data/productId",
                            format!("product {} is already registered (strict)", r.product_id),
                        ));
                    }
                    existing.properties = r.props.clone();
                    if let Some(m) = &r.metadata {
                        existing.metadata = m.clone();
                    }
                    existing.seq = seq;
                } else {
                    self.products.insert(
                        r.product_id.clone(),
                        ProductState {
                            product_id: r.product_id.clone(),
                            properties: r.props.clone(),
                            metadata: r.metadata.clone().unwrap_or_default(),
                            reserved: 0,
                            demand: ProductSales::default(),
                            seq,
                        },
                    );
                    dirty.registered_products.insert(r.product_id.clone());
                }
                dirty.products.insert(r.product_id.clone());
            }
            EntryKind::ItemRegistration(r) => {
                if !self.products.contains_key(&r.product_id) {
                    return Err(reject(
                        rc::UNKNOWN_PRODUCT,
                        "/data/productId",
                        format!(
                            "product {} is not registered (products are never created implicitly)",
                            r.product_id
                        ),
                    ));
                }
                if let Some(m) = &r.metadata {
                    checked_document(m, "/data/metadata")?;
                }
                checked_document(&props_document(&r.props), "/data/properties")?;
                if let Some(existing) = self.items.get_mut(&r.item_id) {
                    if existing.removed {
                        return Err(removed_error(&r.item_id));
                    }
                    if r.strict {
                        return Err(reject(
                            rc::ALREADY_REGISTERED,
                            "/data/itemId",
                            format!("item {} is already registered (strict)", r.item_id),
                        ));
                    }
                    existing.product_id = r.product_id.clone();
                    existing.properties = r.props.clone();
                    if let Some(m) = &r.metadata {
                        existing.metadata = CompactObject::from_map(m);
                    }
                    if r.legacy_quantity.is_some() {
                        existing.legacy_quantity = r.legacy_quantity;
                    }
                    existing.seq = seq;
                } else {
                    self.items.insert(
                        r.item_id.clone(),
                        ItemState {
                            item_id: r.item_id.clone(),
                            product_id: r.product_id.clone(),
                            properties: r.props.clone(),
                            metadata: r
                                .metadata
                                .as_ref()
                                .map(CompactObject::from_map)
                                .unwrap_or_default(),
                            sold: 0,
                            reserved: 0,
                            total: None,
                            legacy_quantity: r.legacy_quantity,
                            revenue_micros: 0,
                            last_sale_at: None,
                            demand: SalesStats::default(),
                            removed: false,
                            seq,
                        },
                    );
                }
                dirty.items.insert(r.item_id.clone());
            }
            EntryKind::ItemRemoval { item_id } => {
                let item = self.live_item_mut(item_id)?;
                item.removed = true;
                item.seq = seq;
                dirty.items.insert(item_id.clone());
            }
            EntryKind::InstanceMetadata(change) => {
                let mut meta = changed_document(&self.header.meta, change, |doc, errors| {
                    crate::meta::check_instance_meta(doc, "", errors);
                })?;
                crate::meta::normalise_dates(&mut meta);
                self.header.meta = meta;
                dirty.header = true;
            }
            EntryKind::ItemMetadata { item_id, change } => {
                let item = self.live_item_mut(item_id)?;
                item.metadata =
                    changed_document(&item.metadata.to_map(), change, |_, _| {})?.into();
                item.seq = seq;
                dirty.items.insert(item_id.clone());
            }
            EntryKind::ProductMetadata { product_id, change } => {
                let product = self.product_mut(product_id)?;
                product.metadata = changed_document(&product.metadata, change, |_, _| {})?;
                product.seq = seq;
                dirty.products.insert(product_id.clone());
            }
            EntryKind::ItemProperties { item_id, change } => {
                let item = self.live_item_mut(item_id)?;
                let doc = shown_properties(&item.properties, ITEM_PROPERTIES_SHOWN_UNSET);
                let mut props = None;
                // The deprecated `quantity` is accepted and ignored (INTERFACE.md).
                changed_document_ignoring(&doc, change, IGNORED_ITEM_PROPERTIES, |doc, errors| {
                    if let Some(map) = doc.as_object() {
                        props = item_props_from_doc(map, "", errors);
                    }
                })?;
                let props = props.ok_or_else(|| invalid("properties are not an object"))?;
                // Stored is the typed form, defaults included: it must fit the limits too.
                checked_document(&props_document(&props), change.pointer())?;
                item.properties = props;
                item.seq = seq;
                dirty.items.insert(item_id.clone());
            }
            EntryKind::ProductProperties { product_id, change } => {
                let product = self.product_mut(product_id)?;
                let doc = shown_properties(&product.properties, PRODUCT_PROPERTIES_SHOWN_UNSET);
                let mut props = None;
                changed_document(&doc, change, |doc, errors| {
                    if let Some(map) = doc.as_object() {
                        props = product_props_from_doc(map, "", errors);
                    }
                })?;
                let props = props.ok_or_else(|| invalid("properties are not an object"))?;
                checked_document(&props_document(&props), change.pointer())?;
                product.properties = props;
                product.seq = seq;
                dirty.products.insert(product_id.clone());
            }
            EntryKind::ItemSale(sale) => {
                let item = self.live_item_mut(&sale.item_id)?;
                let sold = item.sold as i128 + sale.quantity as i128;
                if sold < 0 {
                    return Err(reject(
                        rc::RETURN_EXCEEDS_SOLD,
                        "/data/quantity",
                        format!(
                            "a return of {} exceeds the {} units sold",
                            sale.quantity.unsigned_abs(),
                            item.sold
                        ),
                    ));
                }
                let revenue = item.revenue_micros as i128
                    + sale.price.micros() as i128 * sale.quantity as i128;
                let Ok(sold) = u64::try_from(sold) else {
                    return Err(reject(
                        rc::OUT_OF_RANGE,
                        "/data/quantity",
                        format!(
                            "a sale of {} would take the {} units sold past {}",
                            sale.quantity,
                            item.sold,
                            u64::MAX
                        ),
                    ));
                };
                let Ok(revenue) = i64::try_from(revenue) else {
                    return Err(reject(
                        rc::OUT_OF_RANGE,
                        "/data/quantity",
                        "the item's revenue would leave the range of 64-bit micro-units \
                         (about 9.2 trillion)",
                    ));
                };
                item.sold = sold;
                item.revenue_micros = revenue;
                let at = sale.sold_at.or(entry.timestamp);
                if let Some(at) = at {
                    item.last_sale_at = Some(item.last_sale_at.map_or(at, |l| l.max(at)));
                }
                if sale.quantity > 0 {
                    record_sale(item, sale.quantity.unsigned_abs(), sale.price, at);
                }
                item.seq = seq;
                let mut from_pool = 0;
                if sale.pool && sale.quantity > 0 {
                    // Sell reserved units: free the item's reservation first, then the product's.
                    let q = sale.quantity.unsigned_abs();
                    let from_item = q.min(item.reserved);
                    item.reserved -= from_item;
                    from_pool = q - from_item;
                }
                let product_id = item.product_id.clone();
                dirty.items.insert(sale.item_id.clone());
                let item = &self.items[&sale.item_id];
                if let Some(product) = self.products.get_mut(&product_id) {
                    record_product_sale(product, item, sale.quantity, sale.price, at);
                    if from_pool > 0 && product.reserved > 0 {
                        product.reserved -= from_pool.min(product.reserved);
                    }
                    product.seq = seq;
                    dirty.products.insert(product_id);
                }
            }
            EntryKind::ItemQuantity { item_id, total } => {
                let item = self.live_item_mut(item_id)?;
                if *total < item.sold.saturating_add(item.reserved) {
                    return Err(reject(
                        rc::TOTAL_BELOW_SOLD_AND_RESERVED,
                        "/data/total",
                        format!(
                            "total {total} is below sold ({}) plus reserved ({})",
                            item.sold, item.reserved
                        ),
                    ));
                }
                item.total = Some(*total);
                item.seq = seq;
                dirty.items.insert(item_id.clone());
            }
            EntryKind::ItemReservation { target, reserved } => match target {
                ReservationTarget::Item(item_id) => {
                    let item = self.live_item_mut(item_id)?;
                    item.reserved = *reserved;
                    item.seq = seq;
                    dirty.items.insert(item_id.clone());
                }
                ReservationTarget::Product(product_id) => {
                    let product = self.product_mut(product_id)?;
                    product.reserved = *reserved;
                    product.seq = seq;
                    dirty.products.insert(product_id.clone());
                }
            },
            EntryKind::PricingSchedule(schedule) => {
                self.header.schedule = Some(schedule.clone());
                dirty.header = true;
            }
            EntryKind::InstanceActions(actions) => {
                self.header.actions_windows = actions_windows(actions);
                self.header.actions_window = None;
                dirty.header = true;
            }
        }
        Ok(())
    }

    fn live_item_mut(&mut self, item_id: &ItemId) -> Result<&mut ItemState, Rejection> {
        match self.items.get_mut(item_id) {
            None => Err(reject(
                rc::UNKNOWN_ITEM,
                "/data/itemId",
                format!("item {item_id} is not registered"),
            )),
            Some(item) if item.removed => Err(removed_error(item_id)),
            Some(item) => Ok(item),
        }
    }

    fn product_mut(&mut self, product_id: &ProductId) -> Result<&mut ProductState, Rejection> {
        self.products.get_mut(product_id).ok_or_else(|| {
            reject(
                rc::UNKNOWN_PRODUCT,
                "/data/productId",
                format!("product {product_id} is not registered"),
            )
        })
    }

    /// Aggregates sold and reserved per product in one pass over the items.
    pub fn product_totals(&self) -> BTreeMap<&ProductId, ProductTotals> {
        let mut totals: BTreeMap<&ProductId, ProductTotals> = self
            .products
            .values()
            .map(|p| {
                (
                    &p.product_id,
                    ProductTotals {
                        reserved: p.reserved,
                        ..ProductTotals::default()
                    },
                )
            })
            .collect();
        // Items come in id order and a product's items are usually consecutive: sum each
        // run of them before looking its product up.
        let mut run: Option<(&ProductId, ProductTotals)> = None;
        let add = |totals: &mut BTreeMap<&ProductId, ProductTotals>,
                   (id, sum): (&ProductId, ProductTotals)| {
            if let Some(t) = totals.get_mut(id) {
                t.sold = t.sold.saturating_add(sum.sold);
                t.reserved = t.reserved.saturating_add(sum.reserved);
                if let Some(q) = sum.legacy_capacity {
                    t.legacy_capacity = Some(t.legacy_capacity.unwrap_or(0).saturating_add(q));
                }
            }
        };
        // A removed item's units sold stay sold: they keep taking the product's capacity
        // (and, under a legacy capacity, the part of its quantity they took). Its
        // reservations and the rest of its quantity can no longer be sold, so they hold
        // nothing.
        for item in self.items.values() {
            let same = matches!(&run, Some((id, _)) if **id == item.product_id);
            if !same && let Some(done) = run.replace((&item.product_id, ProductTotals::default())) {
                add(&mut totals, done);
            }
            if let Some((_, t)) = &mut run {
                t.sold = t.sold.saturating_add(item.sold);
                let (reserved, quantity) = match item.removed {
                    false => (item.reserved, item.legacy_quantity),
                    // One that sold nothing takes nothing (not a capacity of 0).
                    true => (
                        0,
                        item.legacy_quantity
                            .filter(|_| item.sold > 0)
                            .map(|q| q.min(item.sold)),
                    ),
                };
                t.reserved = t.reserved.saturating_add(reserved);
                if let Some(q) = quantity {
                    t.legacy_capacity = Some(t.legacy_capacity.unwrap_or(0).saturating_add(q));
                }
            }
        }
        if let Some(done) = run {
            add(&mut totals, done);
        }
        totals
    }

    /// The capacity in force: the product's own, else the sum of legacy item quantities.
    pub fn effective_capacity(product: &ProductState, totals: &ProductTotals) -> Option<u64> {
        product.properties.capacity.or(totals.legacy_capacity)
    }

    /// Counts of a product (capacity shared by its items and reservations).
    pub fn product_counts(product: &ProductState, totals: &ProductTotals) -> Counts {
        let raw = Self::effective_capacity(product, totals)
            .map(|c| c as i128 - totals.sold as i128 - totals.reserved as i128);
        counts(totals.sold, totals.reserved, raw)
    }

    /// Counts of an item: the tighter of its own total and its product's availability (a
    /// removed one: what it sold, nothing reserved or available).
    pub fn item_counts(
        &self,
        item: &ItemState,
        totals: &BTreeMap<&ProductId, ProductTotals>,
    ) -> Counts {
        // A removed item keeps what it sold; it has nothing left to sell, and its
        // reservations were freed.
        if item.removed {
            return counts(item.sold, 0, Some(0));
        }
        let own = item
            .total
            .map(|t| t as i128 - item.sold as i128 - item.reserved as i128);
        let product = self.products.get(&item.product_id).and_then(|p| {
            let t = totals.get(&item.product_id).copied().unwrap_or_default();
            Self::effective_capacity(p, &t).map(|c| c as i128 - t.sold as i128 - t.reserved as i128)
        });
        let raw = match (own, product) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        counts(item.sold, item.reserved, raw)
    }
}

/// `raw` is what would be available, possibly negative; `None` = no limit is known, which
/// shows as nothing available.
fn counts(sold: u64, reserved: u64, raw: Option<i128>) -> Counts {
    let raw = raw.unwrap_or(0);
    Counts {
        sold,
        reserved,
        available: u64::try_from(raw.max(0)).unwrap_or(u64::MAX),
        oversold: u64::try_from((-raw).max(0)).unwrap_or(u64::MAX),
    }
}

fn removed_error(item_id: &ItemId) -> Rejection {
    reject(
        rc::ITEM_REMOVED,
        "/data/itemId",
        format!("item {item_id} was removed permanently"),
    )
}

fn invalid(message: &str) -> Rejection {
    reject(rc::INVALID_DOCUMENT, "/data", message)
}

fn props_document<T: Serialize>(props: &T) -> Map<String, Value> {
    match serde_json::to_value(props) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The optional item properties that item details show as `null` when unset (docs/api.md).
pub const ITEM_PROPERTIES_SHOWN_UNSET: &[&str] = &["dynamicPricingPeriod"];
/// The same for product properties.
pub const PRODUCT_PROPERTIES_SHOWN_UNSET: &[&str] = &["capacity", "recalculation"];

/// Properties as details show them, the optional ones in `unset` as `null` when unset, and
/// as the itemProperties and productProperties patches see them: a patch made by diffing
/// the details (`replace` of a `null` member, `test` for `null`) applies.
pub fn shown_properties<T: Serialize>(props: &T, unset: &[&str]) -> Map<String, Value> {
    let mut map = props_document(props);
    for key in unset {
        map.entry(*key).or_insert(Value::Null);
    }
    map
}

/// Applies `change` to a copy of `doc` within the document limits (every operation is
/// bounded while it runs: see [`crate::document`]), then runs `check` on the result.
fn changed_document(
    doc: &Map<String, Value>,
    change: &DocChange,
    check: impl FnOnce(&Value, &mut Errors),
) -> Result<Map<String, Value>, Rejection> {
    changed_document_ignoring(doc, change, &[], check)
}

/// [`changed_document`] ignoring what touches the top-level fields `ignored`.
fn changed_document_ignoring(
    doc: &Map<String, Value>,
    change: &DocChange,
    ignored: &[&str],
    check: impl FnOnce(&Value, &mut Errors),
) -> Result<Map<String, Value>, Rejection> {
    let mut value = Value::Object(doc.clone());
    change
        .apply_ignoring(&mut value, ignored)
        .map_err(|e| document_rejection(e, change.pointer()))?;
    let mut errors = Errors::default();
    check(&value, &mut errors);
    if let Some(first) = errors.list.first() {
        let more = errors.len() - 1;
        let suffix = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        return Err(reject(
            rc::INVALID_DOCUMENT,
            change.pointer(),
            format!(
                "the changed document breaks a rule at {}: {}{suffix}",
                if first.pointer.is_empty() {
                    "/"
                } else {
                    &first.pointer
                },
                first.message
            ),
        ));
    }
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(invalid("the changed document must stay a JSON object")),
    }
}

fn document_rejection(e: DocumentError, pointer: &str) -> Rejection {
    let code = match e {
        DocumentError::Patch(_) => rc::PATCH_FAILED,
        DocumentError::TooLarge { .. } => rc::DOCUMENT_TOO_LARGE,
        DocumentError::TooDeep { .. } => rc::DOCUMENT_TOO_DEEP,
        DocumentError::CopyBudget { .. }
        | DocumentError::MoveBudget { .. }
        | DocumentError::TooManyOperations { .. } => rc::PATCH_TOO_LARGE,
        DocumentError::NotAnObject => rc::INVALID_DOCUMENT,
    };
    reject(code, pointer, e.to_string())
}

/// A document given whole (registration metadata or properties) within the limits.
fn checked_document(doc: &Map<String, Value>, pointer: &str) -> Result<(), Rejection> {
    crate::document::check_document(doc).map_err(|e| {
        let code = match e {
            DocumentError::TooDeep { .. } => rc::DOCUMENT_TOO_DEEP,
            _ => rc::DOCUMENT_TOO_LARGE,
        };
        reject(code, pointer, e.to_string())
    })
}

/// Converts deprecated enable/disable actions into the windows they enable, in date
/// order: an enable opens a window, the next disable closes it; a disable before any
/// enable closes a window open since the beginning; repeated enables or disables change
/// nothing; a window still open at the last action stays open.
fn actions_windows(actions: &[InstanceAction]) -> Vec<ActionsWindow> {
    let mut sorted = actions.to_vec();
    sorted.sort_by_key(|a| a.date);
    let mut windows = Vec::new();
    // The open window's start (`Some(None)`: open since the beginning).
    let mut open: Option<Option<Timestamp>> = match sorted.first() {
        Some(first) if first.action == ActionKind::Disable => Some(None),
        _ => None,
    };
    for action in &sorted {
        match (action.action, open) {
            (ActionKind::Enable, None) => open = Some(Some(action.date)),
            (ActionKind::Disable, Some(from)) => {
                windows.push(ActionsWindow {
                    from,
                    until: Some(action.date),
                });
                open = None;
            }
            _ => {}
        }
    }
    if let Some(from) = open {
        windows.push(ActionsWindow { from, until: None });
    }
    windows
}

/// Money helper for summaries.
pub fn revenue(item: &ItemState) -> Money {
    Money::from_micros(item.revenue_micros)
}

#[cfg(test)]
mod tests;
