//! Prices: on-demand calculation requests, latest prices of instances, price history.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use pricing_core::ids::{InstanceId, InstanceKey, ItemId};
use pricing_core::model::{Instance, Message, PageRequest};
use pricing_core::ports::{Enqueue, InstanceStore, PriceStore, StateStore};
use pricing_core::pricing::Trigger;
use pricing_core::validate::{Errors, codes, object};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, page_request};
use crate::instances::owned_instance;
use crate::projects::owned_project;
use crate::util::reject_unknown_fields;

/// Largest `metadata` of a calculation request (DESIGN.md section 3).
pub const MAX_METADATA_BYTES: usize = 8 * 1024;
/// Most instances per calculatePrices or instancePrices call.
pub const MAX_INSTANCES_PER_CALL: usize = 100;

/// All instances of a project (for "all instances" requests), in id order.
async fn all_instances<P: Ports>(
    app: &App<P>,
    project: &pricing_core::ids::ProjectId,
) -> ApiResult<Vec<Instance>> {
    let mut out = Vec::new();
    let mut page = PageRequest {
        cursor: None,
        limit: 1_000,
    };
    loop {
        let p = app
            .ports
            .instances()
            .list_instances(project, &page)
            .await
            .map_err(ApiError::store("listing instances"))?;
        out.extend(p.items);
        match p.next {
            Some(next) => page.cursor = Some(next),
            None => return Ok(out),
        }
    }
}

/// POST /projects/{projectId}/calculatePrices: `{instanceIds?, metadata?}` -> 202 with one
/// calculation id per instance; the metadata comes back in the `prices.updated` webhooks.
pub async fn calculate<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let body = body.unwrap_or_else(|| json!({}));
    let mut errors = Errors::default();
    let Some(o) = object(&body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    reject_unknown_fields(&o, &["instanceIds", "metadata"], &[], &mut errors);
    let metadata = o.get("metadata").cloned();
    if let Some(m) = &metadata {
        let size = serde_json::to_vec(m).map_or(usize::MAX, |v| v.len());
        if size > MAX_METADATA_BYTES {
            errors.push(
                "/metadata",
                codes::TOO_LARGE,
                format!("has {size} bytes; at most {MAX_METADATA_BYTES}"),
            );
        }
    }
    let mut wanted: Option<Vec<InstanceId>> = None;
    if let Some(list) = o.opt_array("instanceIds", &mut errors) {
        if list.len() > MAX_INSTANCES_PER_CALL {
            errors.push(
                "/instanceIds",
                codes::RANGE,
                format!("at most {MAX_INSTANCES_PER_CALL} instances per call"),
            );
        }
        let mut ids = Vec::new();
        for (i, v) in list.iter().enumerate() {
            match v.as_str().map(InstanceId::parse) {
                Some(Ok(id)) => ids.push(id),
                _ => errors.push(
                    format!("/instanceIds/{i}"),
                    codes::FORMAT,
                    "must be an instance id",
                ),
            }
        }
        wanted = Some(ids);
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors.list));
    }
    let instances = match wanted {
        None => all_instances(&app, &project.project_id).await?,
        Some(ids) => {
            let mut found = Vec::with_capacity(ids.len());
            for (i, id) in ids.into_iter().enumerate() {
                let key = InstanceKey::new(project.project_id.clone(), id);
                match app
                    .ports
                    .instances()
                    .get_instance(&key)
                    .await
                    .map_err(ApiError::store("reading an instance"))?
                {
                    Some(instance) => found.push(instance),
                    None => errors.push(
                        format!("/instanceIds/{i}"),
                        "unknownInstance",
                        format!(
                            "instance {} does not exist in this project",
                            key.instance_id
                        ),
                    ),
                }
            }
            if !errors.is_empty() {
                return Err(ApiError::validation(errors.list));
            }
            found
        }
    };
    let mut calculations = Vec::with_capacity(instances.len());
    for instance in instances {
        let calculation_id = format!("calc_{}", ulid::Ulid::new());
        app.ports
            .queue()
            .send(&Message::Recalculate {
                key: instance.key(),
                calculation_id: calculation_id.clone(),
                trigger: Trigger::Request,
                metadata: metadata.clone(),
            })
            .await
            .map_err(ApiError::store("enqueueing a calculation"))?;
        calculations
            .push(json!({"instanceId": instance.instance_id, "calculationId": calculation_id}));
    }
    tracing::info!(project = %project.project_id, count = calculations.len(), "calculations requested");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "calculations": calculations })),
    ))
}

fn prices_view(
    instance_id: &InstanceId,
    calc: Option<&pricing_core::model::PriceCalculation>,
) -> Value {
    match calc {
        Some(c) => json!({
            "instanceId": instance_id,
            "calculationId": c.calculation_id,
            "calculatedAt": c.calculated_at,
            "sequence": c.sequence,
            "prices": c.prices.iter().map(|p| json!({"itemId": p.item_id, "price": p.price})).collect::<Vec<_>>(),
        }),
        None => json!({
            "instanceId": instance_id,
            "calculationId": null,
            "calculatedAt": null,
            "sequence": 0,
            "prices": [],
        }),
    }
}

/// GET /projects/{projectId}/instancePrices?instanceId=a&instanceId=b (or all, paged).
pub async fn instance_prices<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let selected: Vec<&String> = query
        .iter()
        .filter(|(k, _)| k == "instanceId")
        .map(|(_, v)| v)
        .collect();
    if selected.len() > MAX_INSTANCES_PER_CALL {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_INSTANCES_PER_CALL} instanceId parameters per call"
        )));
    }
    let (instances, next) = if selected.is_empty() {
        let page = page_request(&query)?;
        let p = app
            .ports
            .instances()
            .list_instances(&project.project_id, &page)
            .await
            .map_err(ApiError::store("listing instances"))?;
        (
            p.items
                .into_iter()
                .map(|i| i.instance_id)
                .collect::<Vec<_>>(),
            p.next,
        )
    } else {
        let mut ids = Vec::new();
        for raw in selected {
            let unknown =
                || ApiError::bad_request(format!("instance {raw} does not exist in this project"));
            let id = InstanceId::parse(raw.as_str()).map_err(|_| unknown())?;
            let key = InstanceKey::new(project.project_id.clone(), id.clone());
            app.ports
                .instances()
                .get_instance(&key)
                .await
                .map_err(ApiError::store("reading an instance"))?
                .ok_or_else(unknown)?;
            ids.push(id);
        }
        (ids, None)
    };
    let mut items = Vec::with_capacity(instances.len());
    for id in instances {
        let key = InstanceKey::new(project.project_id.clone(), id.clone());
        let latest = app
            .ports
            .prices()
            .latest_prices(&key)
            .await
            .map_err(ApiError::store("reading prices"))?;
        items.push(prices_view(&id, latest.as_ref()));
    }
    Ok(Json(json!({ "items": items, "next": next })))
}

/// GET .../items/{itemId}/priceHistory: every calculated price with trigger and explanation.
pub async fn price_history<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id, item_id)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let item = ItemId::parse(item_id.as_str())
        .map_err(|_| ApiError::not_found(format!("item {item_id} does not exist")))?;
    let page = page_request(&query)?;
    let history = app
        .ports
        .prices()
        .price_history(&instance.key(), &item, &page)
        .await
        .map_err(ApiError::store("reading price history"))?;
    if history.items.is_empty() && page.cursor.is_none() {
        // An item that never existed is a 404; an item without prices yet is an empty list.
        let state = app
            .ports
            .state()
            .load_state(&instance.key())
            .await
            .map_err(ApiError::store("reading instance state"))?;
        if !state.items.contains_key(&item) {
            return Err(ApiError::not_found(format!(
                "item {item_id} does not exist"
            )));
        }
    }
    Ok(Json(
        json!({ "items": history.items, "next": history.next }),
    ))
}
