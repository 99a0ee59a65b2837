//! Item and product summaries, paged: instance details inline the first page of each (with
//! `itemsNext` / `productsNext`), and `GET .../items` and `GET .../products` list the rest
//! (`{items, next}`, the listing shape). An instance may hold any number of items (100,000
//! summaries are ~11 MB of JSON, past Lambda's 6 MB response limit), so no response lists
//! them all.
//!
//! Summaries are in id order; the cursor is the last id of the page. Each page is counted
//! from the instance's state as it is when the page is read.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use pricing_core::ids::{ItemId, ProductId};
use pricing_core::state::{InstanceState, ItemState, ProductState, ProductTotals};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, Path, cursor_id, page_request, single_valued};
use crate::instances::{load_state, owned_instance};
use crate::paging::{Budget, MAX_PAGE_BYTES, json_len};

type Totals<'a> = BTreeMap<&'a ProductId, ProductTotals>;

/// One item's summary (DESIGN.md section 8: no prices, no periods).
pub fn item_summary(state: &InstanceState, item: &ItemState, totals: &Totals<'_>) -> Value {
    let c = state.item_counts(item, totals);
    json!({
        "itemId": item.item_id,
        "productId": item.product_id,
        "dynamicPricing": item.properties.dynamic_pricing,
        "sold": c.sold,
        "reserved": c.reserved,
        "available": c.available,
        "oversold": c.oversold,
    })
}

/// One product's summary.
pub fn product_summary(product: &ProductState, totals: &Totals<'_>) -> Value {
    let t = totals.get(&product.product_id).copied().unwrap_or_default();
    let c = InstanceState::product_counts(product, &t);
    json!({
        "productId": product.product_id,
        "capacity": InstanceState::effective_capacity(product, &t),
        "sold": c.sold,
        "reserved": c.reserved,
        "available": c.available,
        "oversold": c.oversold,
    })
}

/// Takes views from `views` while the count and the bytes allow; the cursor is the id of
/// the last one taken when another follows.
fn take_page(
    views: impl Iterator<Item = (String, Value)>,
    limit: usize,
    max_bytes: usize,
) -> (Vec<Value>, Option<String>) {
    let mut budget = Budget::new(max_bytes);
    let mut page = Vec::new();
    let mut last: Option<String> = None;
    for (id, view) in views {
        if page.len() == limit || !budget.take(json_len(&view)) {
            return (page, last);
        }
        page.push(view);
        last = Some(id);
    }
    (page, None)
}

/// The ids after `cursor` in a map keyed by id.
fn after<'a, K: Ord, V>(
    map: &'a BTreeMap<K, V>,
    cursor: Option<&K>,
) -> impl Iterator<Item = &'a V> + 'a {
    let from = match cursor {
        Some(c) => Bound::Excluded(c),
        None => Bound::Unbounded,
    };
    map.range((from, Bound::Unbounded)).map(|(_, v)| v)
}

/// A page of item summaries after `cursor` (of one product when `product` is given).
pub fn item_page(
    state: &InstanceState,
    cursor: Option<&ItemId>,
    product: Option<&ProductId>,
    limit: usize,
    max_bytes: usize,
) -> (Vec<Value>, Option<String>) {
    let totals = state.product_totals();
    let views = after(&state.items, cursor)
        .filter(|i| !i.removed && product.is_none_or(|p| &i.product_id == p))
        .map(|i| (i.item_id.to_string(), item_summary(state, i, &totals)));
    take_page(views, limit, max_bytes)
}

/// A page of one product's item ids (its details inline them).
pub fn product_item_ids(
    state: &InstanceState,
    product: &ProductId,
    limit: usize,
    max_bytes: usize,
) -> (Vec<Value>, Option<String>) {
    let views = state
        .items
        .values()
        .filter(|i| !i.removed && &i.product_id == product)
        .map(|i| (i.item_id.to_string(), json!(i.item_id)));
    take_page(views, limit, max_bytes)
}

/// A page of product summaries after `cursor`.
pub fn product_page(
    state: &InstanceState,
    cursor: Option<&ProductId>,
    limit: usize,
    max_bytes: usize,
) -> (Vec<Value>, Option<String>) {
    let totals = state.product_totals();
    let views = after(&state.products, cursor)
        .map(|p| (p.product_id.to_string(), product_summary(p, &totals)));
    take_page(views, limit, max_bytes)
}

/// GET .../instances/{instanceId}/items?cursor=&limit=&productId=: item summaries in id
/// order (of one product with `productId`), continuing instance or product details.
pub async fn list_items<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    single_valued(&query, &[&["productId"]])?;
    let page = page_request(&query)?;
    let cursor = cursor_id::<ItemId>(&page)?;
    // An empty `productId=` filters nothing, as an empty `cursor=` names no position (it
    // was a 404 for a product named "").
    let product = query
        .iter()
        .find(|(k, v)| k == "productId" && !v.is_empty())
        .map(|(_, v)| {
            ProductId::parse(v.as_str())
                .map_err(|_| ApiError::not_found(format!("product {v} does not exist")))
        })
        .transpose()?;
    let state = load_state(&app, &instance.key()).await?;
    if let Some(p) = &product
        && !state.products.contains_key(p)
    {
        return Err(ApiError::not_found(format!("product {p} does not exist")));
    }
    let (items, next) = item_page(
        &state,
        cursor.as_ref(),
        product.as_ref(),
        page.limit,
        MAX_PAGE_BYTES,
    );
    Ok(Json(json!({ "items": items, "next": next })))
}

/// GET .../instances/{instanceId}/products?cursor=&limit=: product summaries in id order,
/// continuing instance details.
pub async fn list_products<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let page = page_request(&query)?;
    let cursor = cursor_id::<ProductId>(&page)?;
    let state = load_state(&app, &instance.key()).await?;
    let (items, next) = product_page(&state, cursor.as_ref(), page.limit, MAX_PAGE_BYTES);
    Ok(Json(json!({ "items": items, "next": next })))
}
