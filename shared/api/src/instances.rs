//! Instances: create, list, details (with item summaries), update; item and product details.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use pricing_core::document::{DocumentError, MAX_DOCUMENT_DEPTH};
use pricing_core::ids::{InstanceId, InstanceKey, ItemId, ProductId};
use pricing_core::meta::check_instance_meta;
use pricing_core::model::Instance;
use pricing_core::ports::{EntryLog, InstanceStore, StateStore, StoreError};
use pricing_core::pricing::dynamic_pricing_periods;
use pricing_core::state::{
    Header, ITEM_PROPERTIES_SHOWN_UNSET, InstanceState, PRODUCT_PROPERTIES_SHOWN_UNSET,
    shown_properties,
};
use pricing_core::time::{Period, Timestamp};
use pricing_core::validate::{Errors, codes, object};
use serde_json::{Map, Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, MAX_PAGE, Path, cursor_id, page_request};
use crate::paging::{MAX_INLINE_BYTES, store_page};
use crate::projects::owned_project;
use crate::summaries::{item_page, product_item_ids, product_page};
use crate::util::{check_time_zone, now, reject_nulls, reject_unknown_fields};

pub fn instance_view(i: &Instance) -> Value {
    let now = now();
    json!({
        "instanceId": i.instance_id,
        "projectId": i.project_id,
        "name": i.name,
        "active": i.is_active(now),
        "deactivated": i.is_deactivated(now),
        "timeZone": i.time_zone,
        "deactivationDate": i.deactivation_date,
        "createdAt": i.created_at,
        "updatedAt": i.updated_at,
    })
}

/// The caller's instance, or 404.
pub async fn owned_instance<P: Ports>(
    app: &App<P>,
    caller: &Caller,
    project_id: &str,
    instance_id: &str,
) -> ApiResult<Instance> {
    let project = owned_project(app, caller, project_id).await?;
    let not_found = || ApiError::not_found(format!("instance {instance_id} does not exist"));
    let id = InstanceId::parse(instance_id).map_err(|_| not_found())?;
    app.ports
        .instances()
        .get_instance(&project.key().instance(id))
        .await
        .map_err(ApiError::store("reading an instance"))?
        .ok_or_else(not_found)
}

pub async fn create<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let body = body.ok_or_else(|| {
        ApiError::invalid_field("", codes::REQUIRED, "a JSON object is required (may be {})")
    })?;
    let mut errors = Errors::default();
    let Some(o) = object(&body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    reject_unknown_fields(
        &o,
        &[
            "instanceId",
            "name",
            "timeZone",
            "active",
            "deactivationDate",
            "meta",
        ],
        &[],
        &mut errors,
    );
    reject_nulls(&o, &["timeZone", "deactivationDate"], &mut errors);
    let instance_id = o.opt_id::<InstanceId>("instanceId", &mut errors);
    o.refuse_dot_segment("instanceId", &mut errors);
    let name = o
        .opt_str("name", &mut errors)
        .unwrap_or_default()
        .to_owned();
    let time_zone = check_time_zone(&o, "timeZone", &mut errors).flatten();
    let active = o.opt_bool("active", &mut errors).unwrap_or(false);
    let deactivation_date = o.opt_timestamp("deactivationDate", &mut errors);
    let meta = match o.get("meta") {
        Some(m) => {
            check_instance_meta(m, "/meta", &mut errors);
            let mut meta = m.as_object().cloned().unwrap_or_default();
            pricing_core::meta::normalise_dates(&mut meta);
            meta
        }
        None => Map::new(),
    };
    match pricing_core::document::check_document(&meta) {
        Ok(()) => {}
        Err(DocumentError::TooDeep { depth, .. }) => errors.push(
            "/meta",
            codes::TOO_DEEP,
            format!("is {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}"),
        ),
        Err(_) => errors.push("/meta", codes::TOO_LARGE, "must be at most 64 KiB"),
    }
    if name.chars().count() > 256 {
        errors.push("/name", codes::RANGE, "must be at most 256 characters");
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors.list));
    }
    let now = now();
    let instance = Instance {
        tenant: project.tenant.clone(),
        project_id: project.project_id.clone(),
        instance_id: instance_id.unwrap_or_else(InstanceId::generate),
        name,
        active,
        time_zone,
        deactivation_date,
        created_at: now,
        updated_at: now,
        // Every instance whose date passes gets its event, even one created past it.
        deactivation_announced: Some(false),
    };
    if instance.active && instance.is_deactivated(now) {
        return Err(ApiError::unprocessable(
            "the deactivation date has passed: the instance cannot be active",
        ));
    }
    let header = Header {
        meta,
        ..Header::default()
    };
    let max = app.limits.quotas.instances_per_project;
    match app
        .ports
        .instances()
        .create_instance_within(&instance, &header, max)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(project = %instance.project_id, max, "instance quota reached");
            return Err(ApiError::quota_exceeded(format!(
                "project {} already holds {max} instances, the most a project may hold",
                instance.project_id
            )));
        }
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::conflict(format!(
                "instance {} already exists in project {}",
                instance.instance_id, instance.project_id
            )));
        }
        Err(e) => return Err(ApiError::store("creating an instance")(e)),
    }
    tracing::info!(project = %instance.project_id, instance = %instance.instance_id, "instance created");
    let mut view = instance_view(&instance);
    view["meta"] = Value::Object(header.meta);
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn list<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let page = page_request(&query)?;
    cursor_id::<InstanceId>(&page)?;
    let project = project.key();
    let (items, next) = store_page(
        page,
        |page| {
            let (app, project) = (&app, &project);
            async move {
                app.ports
                    .instances()
                    .list_instances(project, &page)
                    .await
                    .map_err(ApiError::store("listing instances"))
            }
        },
        instance_view,
    )
    .await?;
    Ok(Json(json!({ "items": items, "next": next })))
}

/// The instance's state as stored: shared with the processor's warm states where this
/// process has them ([`App::warm`]), else loaded.
pub(crate) async fn load_state<P: Ports>(
    app: &App<P>,
    key: &InstanceKey,
) -> ApiResult<Arc<InstanceState>> {
    let store = app.ports.state();
    match &app.warm {
        Some(processor) => processor.shared_state(store, key).await,
        None => store.load_state(key).await.map(Arc::new),
    }
    .map_err(ApiError::store("reading instance state"))
}

/// Instance details with the first page of item and product summaries (no prices, no
/// periods on items).
pub async fn details<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let state = load_state(&app, &instance.key()).await?;
    let last_sequence = app
        .ports
        .log()
        .last_sequence(&instance.key())
        .await
        .map_err(ApiError::store("reading the log head"))?;
    // The first page of each: an instance may hold any number of items (docs/api.md,
    // "Paging"); `itemsNext` and `productsNext` continue in GET .../items and .../products.
    let (items, items_next) = item_page(&state, None, None, MAX_PAGE, MAX_INLINE_BYTES);
    let (products, products_next) = product_page(&state, None, MAX_PAGE, MAX_INLINE_BYTES);
    let mut view = instance_view(&instance);
    view["meta"] = Value::Object(state.header.meta.clone());
    view["items"] = Value::Array(items);
    view["itemsNext"] = json!(items_next);
    view["products"] = Value::Array(products);
    view["productsNext"] = json!(products_next);
    view["processing"] = json!({
        "appliedSequence": state.header.applied_seq,
        "lastSequence": last_sequence,
    });
    Ok(Json(view))
}

/// PUT: name, active, timeZone, deactivationDate. Metadata changes go through entries.
pub async fn update<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<Json<Value>> {
    let mut instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let body = body
        .ok_or_else(|| ApiError::invalid_field("", codes::REQUIRED, "a JSON object is required"))?;
    let mut errors = Errors::default();
    let Some(o) = object(&body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    for removed in ["addMeta", "replaceMeta"] {
        o.removed(
            removed,
            "addMeta and replaceMeta were removed in 2.0.0: submit an instanceMetadata entry with a JSON Patch",
            &mut errors,
        );
    }
    o.removed(
        "meta",
        "instance metadata changes through an instanceMetadata entry (JSON Patch on /dates, /location, ...)",
        &mut errors,
    );
    reject_unknown_fields(
        &o,
        &["name", "active", "timeZone", "deactivationDate"],
        &["addMeta", "replaceMeta", "meta"],
        &mut errors,
    );
    reject_nulls(
        &o,
        &[
            "timeZone",
            "deactivationDate",
            "addMeta",
            "replaceMeta",
            "meta",
        ],
        &mut errors,
    );
    let name = o.opt_str("name", &mut errors).map(str::to_owned);
    if name.as_ref().is_some_and(|n| n.chars().count() > 256) {
        errors.push("/name", codes::RANGE, "must be at most 256 characters");
    }
    let active = o.opt_bool("active", &mut errors);
    let time_zone = check_time_zone(&o, "timeZone", &mut errors);
    let deactivation_date = if o.map.contains_key("deactivationDate") {
        Some(o.opt_timestamp("deactivationDate", &mut errors))
    } else {
        None
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors.list));
    }
    let change = InstanceChange {
        name,
        active,
        time_zone,
        deactivation_date,
    };
    // Each write replaces the record only if nothing wrote it since it was read: two
    // updates at once (a rename, and the flag turned off) each apply to what the other
    // wrote instead of one undoing the other.
    let mut attempt = 1;
    loop {
        let read_at = instance.updated_at;
        change.apply(&mut instance, now().at_least_after(read_at))?;
        match app.ports.instances().put_instance(&instance, read_at).await {
            Ok(()) => break,
            Err(StoreError::Conflict(_)) if attempt < UPDATE_ATTEMPTS => {
                attempt += 1;
                instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
            }
            Err(StoreError::Conflict(_)) => {
                return Err(ApiError::conflict(format!(
                    "instance {instance_id} was changed by {UPDATE_ATTEMPTS} other writes while this one was applied; send it again"
                )));
            }
            Err(e) => return Err(ApiError::store("updating an instance")(e)),
        }
    }
    tracing::info!(project = %instance.project_id, instance = %instance.instance_id, "instance updated");
    Ok(Json(instance_view(&instance)))
}

/// Attempts of an update that other writes keep overtaking (each re-reads the record).
const UPDATE_ATTEMPTS: u32 = 5;

/// What a PUT changes (absent: unchanged; `deactivation_date: Some(None)` removes it).
struct InstanceChange {
    name: Option<String>,
    active: Option<bool>,
    time_zone: Option<Option<String>>,
    deactivation_date: Option<Option<Timestamp>>,
}

impl InstanceChange {
    /// Applies the change to the record as read, written at `now`; 422 when the record's
    /// deactivation forbids it.
    fn apply(&self, instance: &mut Instance, now: Timestamp) -> ApiResult<()> {
        // Announced: the scheduler saw the date pass, whatever this clock says (a record
        // active and announced would stay in the scheduler's index for good).
        let passed = instance.is_deactivated(now)
            || (instance.deactivation_date.is_some()
                && pricing_core::lifecycle::deactivation_announced(instance));
        if passed {
            if self.active == Some(true) {
                return Err(ApiError::unprocessable(
                    "the instance passed its deactivation date and cannot be activated again",
                ));
            }
            if self
                .deactivation_date
                .is_some_and(|d| d != instance.deactivation_date)
            {
                return Err(ApiError::unprocessable(
                    "the instance passed its deactivation date; the date can no longer change",
                ));
            }
        }
        // Said on every write (a record from before the flag was kept is read by the rule
        // of then); a new date awaits its own event.
        instance.deactivation_announced =
            Some(pricing_core::lifecycle::deactivation_announced(instance));
        if let Some(name) = &self.name {
            instance.name.clone_from(name);
        }
        if let Some(active) = self.active {
            instance.active = active;
        }
        if let Some(tz) = &self.time_zone {
            instance.time_zone.clone_from(tz);
        }
        if let Some(d) = self.deactivation_date {
            if d != instance.deactivation_date {
                instance.deactivation_announced = Some(false);
            }
            instance.deactivation_date = d;
        }
        if self.active == Some(true) && instance.is_deactivated(now) {
            return Err(ApiError::unprocessable(
                "the deactivation date has passed: the instance cannot be active",
            ));
        }
        instance.updated_at = now;
        Ok(())
    }
}

pub async fn item<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id, item_id)): Path<(String, String, String)>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let not_found = || ApiError::not_found(format!("item {item_id} does not exist"));
    let id = ItemId::parse(item_id.as_str()).map_err(|_| not_found())?;
    let state = load_state(&app, &instance.key()).await?;
    // A removed item stays readable (its sales, properties and price history are the
    // record of what it sold), marked `removed`: it has nothing left to sell, and its
    // reservations were freed.
    let item = state.items.get(&id).ok_or_else(not_found)?;
    let totals = state.product_totals();
    let c = state.item_counts(item, &totals);
    let price_matches = crate::matches::rules_of_item(&app, &instance.key(), &id).await?;
    // Where scheduled pricing applies: its own dynamicPricingPeriod, else its sales period
    // within each window of the deprecated instanceActions.
    let periods: Vec<Period> =
        dynamic_pricing_periods(&item.properties, state.header.action_windows()).collect();
    let mut details = json!({
        "itemId": item.item_id,
        "productId": item.product_id,
        "properties": shown_properties(&item.properties, ITEM_PROPERTIES_SHOWN_UNSET),
        "metadata": item.metadata,
        "dynamicPricingPeriods": periods,
        "sold": c.sold,
        "reserved": c.reserved,
        "available": c.available,
        "oversold": c.oversold,
        "total": item.total,
        "priceMatches": price_matches,
    });
    if item.removed {
        details["removed"] = json!(true);
    }
    Ok(Json(details))
}

pub async fn product<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id, product_id)): Path<(String, String, String)>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let not_found = || ApiError::not_found(format!("product {product_id} does not exist"));
    let id = ProductId::parse(product_id.as_str()).map_err(|_| not_found())?;
    let state = load_state(&app, &instance.key()).await?;
    let product = state.products.get(&id).ok_or_else(not_found)?;
    let totals = state.product_totals();
    let t = totals.get(&id).copied().unwrap_or_default();
    let c = InstanceState::product_counts(product, &t);
    // The first page of its item ids; `itemsNext` continues in GET .../items?productId=.
    let (items, items_next) = product_item_ids(&state, &id, MAX_PAGE, MAX_INLINE_BYTES);
    Ok(Json(json!({
        "productId": product.product_id,
        "properties": shown_properties(&product.properties, PRODUCT_PROPERTIES_SHOWN_UNSET),
        "metadata": product.metadata,
        "capacity": InstanceState::effective_capacity(product, &t),
        "sold": c.sold,
        "reserved": c.reserved,
        "productReserved": product.reserved,
        "available": c.available,
        "oversold": c.oversold,
        "items": items,
        "itemsNext": items_next,
    })))
}
