//! Prices: on-demand calculation requests, latest prices of instances, price history.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use pricing_core::document::MAX_DOCUMENT_DEPTH;
use pricing_core::ids::{InstanceId, ItemId, ProjectKey};
use pricing_core::model::{Instance, Message, PageRequest};
use pricing_core::money::Money;
use pricing_core::ports::{Enqueue, InstanceStore, LatestPricesPage, PriceStore, StoreError};
use pricing_core::pricing::Trigger;
use pricing_core::validate::{Errors, codes, object};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult, TOO_MANY_INSTANCES};
use crate::extract::{Caller, JsonBody, Path, page_request};
use crate::instances::owned_instance;
use crate::paging::{Budget, MAX_PAGE_BYTES, json_len, store_page};
use crate::projects::owned_project;
use crate::util::{now, reject_nulls, reject_unknown_fields};

/// Largest `metadata` of a calculation request (DESIGN.md section 3).
pub const MAX_METADATA_BYTES: usize = 8 * 1024;
/// Most instances per calculatePrices or instancePrices call.
pub const MAX_INSTANCES_PER_CALL: usize = 100;

/// The instances a project-wide calculation prices, in id order: every instance not past
/// its deactivation date (whose pricing has ended), at most `max`; a project with more is
/// refused (422 `tooManyInstances`), since every instance costs a message sent while the
/// request waits. Deactivated instances do not count (the listing pages past them, within
/// the project's instance quota).
async fn priced_instances<P: Ports>(
    app: &App<P>,
    project: &ProjectKey,
    max: usize,
    now: pricing_core::time::Timestamp,
) -> ApiResult<Vec<Instance>> {
    let mut priced = Vec::new();
    let mut cursor = None;
    loop {
        let page = app
            .ports
            .instances()
            .list_instances(
                project,
                &PageRequest {
                    cursor,
                    limit: max.max(1),
                },
            )
            .await
            .map_err(ApiError::store("listing instances"))?;
        priced.extend(page.items.into_iter().filter(|i| !i.is_deactivated(now)));
        if priced.len() > max {
            tracing::info!(%project, max, "calculatePrices over too many instances refused");
            return Err(ApiError::rule(
                "/instanceIds",
                TOO_MANY_INSTANCES,
                format!(
                    "project {project} has more than {max} instances to price, the most one \
                     request calculates without instanceIds; name them in instanceIds, at \
                     most {MAX_INSTANCES_PER_CALL} per request"
                ),
            ));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(priced),
        }
    }
}

/// The 422 code of a `calculatePrices` naming an instance past its deactivation date.
const INSTANCE_DEACTIVATED: &str = "instanceDeactivated";

/// POST /projects/{projectId}/calculatePrices: `{instanceIds?, metadata?}` -> 202 with one
/// calculation id per instance; the metadata comes back in the `prices.updated` webhooks.
pub async fn calculate<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let body = body.unwrap_or_else(|| json!({}));
    let mut errors = Errors::default();
    let Some(o) = object(&body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    reject_unknown_fields(&o, &["instanceIds", "metadata"], &[], &mut errors);
    reject_nulls(&o, &[], &mut errors);
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
        // It is stored inside the calculation's events: bounded like a document, so that
        // every record holding it decodes.
        let depth = pricing_core::document::depth(m);
        if depth > MAX_DOCUMENT_DEPTH {
            errors.push(
                "/metadata",
                codes::TOO_DEEP,
                format!("is {depth} levels deep; at most {MAX_DOCUMENT_DEPTH}"),
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
        } else if list.is_empty() {
            // A selection that selects nothing is most likely a client's empty filter: a
            // 202 with no calculation would read as done (before 2026-11-30 it was).
            errors.push(
                "/instanceIds",
                codes::RANGE,
                "names no instance: name at least one, or leave instanceIds out to \
                 calculate every instance",
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
    let now = now();
    let instances = match wanted {
        // Past its deactivation date an instance's pricing has ended (INTERFACE.md): a
        // project-wide calculation leaves it out.
        None => {
            priced_instances(&app, &project.key(), app.limits.max_calculation_fanout, now).await?
        }
        Some(ids) => {
            let mut found: Vec<Instance> = Vec::with_capacity(ids.len());
            // Read at once (up to 100 reads: one after the other they took a second on
            // DynamoDB), then judged in the order named. An instance named twice is
            // calculated (or refused) once.
            let reads = ids
                .iter()
                .enumerate()
                .filter(|(i, id)| !ids[..*i].contains(id))
                .map(|(i, id)| {
                    let key = project.key().instance(id.clone());
                    let app = &app;
                    async move {
                        let read = app.ports.instances().get_instance(&key).await;
                        (i, key, read)
                    }
                });
            for (i, key, read) in futures_util::future::join_all(reads).await {
                match read.map_err(ApiError::store("reading an instance"))? {
                    Some(instance) if instance.is_deactivated(now) => errors.push(
                        format!("/instanceIds/{i}"),
                        INSTANCE_DEACTIVATED,
                        format!(
                            "instance {} was deactivated: its pricing has ended",
                            key.instance_id
                        ),
                    ),
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
            // An unknown id is a bad request (400) whatever else; valid ids of instances
            // whose pricing has ended break a rule (422). Either way nothing is done.
            let (ended, unknown): (Vec<_>, Vec<_>) = errors
                .list
                .into_iter()
                .partition(|e| e.code == INSTANCE_DEACTIVATED);
            if !unknown.is_empty() {
                return Err(ApiError::validation(unknown));
            }
            if !ended.is_empty() {
                return Err(
                    ApiError::unprocessable("a deactivated instance is not priced again")
                        .with_errors(ended),
                );
            }
            found
        }
    };
    let mut calculations = Vec::with_capacity(instances.len());
    let mut messages = Vec::with_capacity(instances.len());
    for instance in instances {
        let calculation_id = format!("calc_{}", ulid::Ulid::new());
        calculations
            .push(json!({"instanceId": instance.instance_id, "calculationId": calculation_id}));
        messages.push(Message::Recalculate {
            key: instance.key(),
            calculation_id,
            trigger: Trigger::Request,
            metadata: metadata.clone(),
        });
    }
    app.ports
        .queue()
        .send_all(&messages)
        .await
        .map_err(ApiError::store("enqueueing the calculations"))?;
    tracing::info!(project = %project.project_id, count = calculations.len(), "calculations requested");
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "calculations": calculations })),
    ))
}

fn price_view(item_id: &ItemId, price: Money) -> Value {
    json!({"itemId": item_id, "price": price})
}

/// The fewest bytes a [`price_view`] takes: `{"itemId":"a","price":0}`. A page of `room`
/// bytes holds at most `room / MIN_PRICE_VIEW_BYTES + 1` prices, so no more are read.
const MIN_PRICE_VIEW_BYTES: usize = 24;

/// An instance's latest prices as instancePrices lists them, with `prices` given.
fn prices_view(
    instance_id: &InstanceId,
    calc: Option<&LatestPricesPage>,
    prices: Vec<Value>,
) -> Value {
    match calc {
        Some(c) => json!({
            "instanceId": instance_id,
            "calculationId": c.calculation_id,
            "calculatedAt": c.calculated_at,
            "sequence": c.sequence,
            "prices": prices,
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

/// Where a page of instancePrices starts: after `after` in the instance listing (all
/// instances) or at `index` of the selection (`instanceId=`), and `offset` prices into the
/// first instance's calculation `calc` when the previous page cut its price list.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Resume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    calc: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    offset: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Starts every cursor of this listing.
const RESUME_MARK: char = '@';

impl Resume {
    /// A cursor of this listing: `@` + base64url(JSON), opaque to clients.
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{RESUME_MARK}{}", B64.encode(json))
    }

    /// Reads a cursor this listing handed out; anything else is a 400, never an empty
    /// page that a client would take for the end of the listing.
    fn decode(cursor: Option<&str>) -> ApiResult<Resume> {
        let Some(cursor) = cursor else {
            return Ok(Resume::default());
        };
        let bad =
            || ApiError::bad_request(format!("cursor {cursor} is not a cursor of this listing"));
        let encoded = cursor.strip_prefix(RESUME_MARK).ok_or_else(bad)?;
        let json = B64.decode(encoded).map_err(|_| bad())?;
        let resume: Resume = serde_json::from_slice(&json).map_err(|_| bad())?;
        // Every cursor handed out says something, and an offset only into a calculation.
        if resume == Resume::default() || (resume.offset != 0 && resume.calc.is_none()) {
            return Err(bad());
        }
        Ok(resume)
    }
}

/// Where a page of instancePrices stopped.
enum Stop {
    /// Every instance it was given is listed whole.
    Done,
    /// Before the instance at this index (it did not fit whole).
    Before(usize),
    /// Inside the first instance: its calculation and the prices listed so far.
    Within { calc: String, offset: usize },
}

/// Latest prices of `ids` in order, within [`MAX_PAGE_BYTES`]: instances after the first
/// are listed whole or left for the next page; the first instance's price list is cut
/// where the bytes end (it starts at `start.offset` when `start.calc` is still its latest
/// calculation, else from the beginning).
async fn prices_page<P: Ports>(
    app: &App<P>,
    project: &ProjectKey,
    ids: &[InstanceId],
    start: &Resume,
) -> ApiResult<(Vec<Value>, Stop)> {
    let mut budget = Budget::new(MAX_PAGE_BYTES);
    let mut items = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        let key = project.instance(id.clone());
        // Only the prices that could fit are read: a page of a large instance's prices
        // does not decode the whole list.
        let room = MAX_PAGE_BYTES.saturating_sub(budget.used());
        let wanted = room / MIN_PRICE_VIEW_BYTES + 1;
        let key = &key;
        let read = |offset: usize| async move {
            app.ports
                .prices()
                .latest_prices_page(key, offset, wanted)
                .await
                .map_err(ApiError::store("reading prices"))
        };
        // The first instance continues where the previous page cut its list, if that
        // calculation is still its latest.
        let resumed = match &start.calc {
            Some(calc) if i == 0 => Some((calc, start.offset)),
            _ => None,
        };
        let mut latest = read(resumed.map_or(0, |(_, offset)| offset)).await?;
        let skip = match (&latest, resumed) {
            // A cut list has prices left after the cut: an offset at or past its end is
            // not one this listing handed out.
            (Some(c), Some((calc, offset))) if &c.calculation_id == calc => {
                if offset >= c.total {
                    return Err(ApiError::bad_request(format!(
                        "cursor is not one of this listing: calculation {calc} has {} prices, \
                         not {offset} and more; use a `next` it returned",
                        c.total
                    )));
                }
                offset
            }
            (Some(_), Some(_)) => {
                latest = read(0).await?;
                0
            }
            _ => 0,
        };
        let total = latest.as_ref().map_or(0, |c| c.total);
        let page: &[(ItemId, Money)] = latest.as_ref().map_or(&[], |c| &c.prices);
        let base = json_len(&prices_view(id, latest.as_ref(), Vec::new()));
        // Only the first instance's list is cut; later ones are measured whole.
        let mut prices = Budget::new(if i == 0 {
            MAX_PAGE_BYTES.saturating_sub(base)
        } else {
            usize::MAX
        });
        let mut views = Vec::new();
        for (item_id, price) in page {
            let v = price_view(item_id, *price);
            if !prices.take(json_len(&v)) {
                break;
            }
            views.push(v);
        }
        let listed = views.len();
        // A later instance whose list was not read whole cannot fit whole.
        let whole = skip + page.len() >= total;
        if (i > 0 && !whole) || !budget.take(base + prices.used()) {
            return Ok((items, Stop::Before(i)));
        }
        items.push(prices_view(id, latest.as_ref(), views));
        if skip + listed < total {
            let calc = latest.map(|c| c.calculation_id).unwrap_or_default();
            let offset = skip + listed;
            return Ok((items, Stop::Within { calc, offset }));
        }
    }
    Ok((items, Stop::Done))
}

/// GET /projects/{projectId}/instancePrices?instanceId=a&instanceId=b (or all, paged). A
/// page holds at most [`MAX_PAGE_BYTES`] of prices: an instance that does not fit whole
/// waits for the next page, where the first instance's price list may be cut and continue
/// on the page after (same instanceId and calculationId, the following prices).
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
    let page = page_request(&query)?;
    let start = Resume::decode(page.cursor.as_deref())?;
    let bad_cursor = || {
        ApiError::bad_request(format!(
            "cursor {} is not a cursor of this listing",
            page.cursor.as_deref().unwrap_or_default()
        ))
    };
    if selected.is_empty() {
        if start.index != 0 {
            return Err(bad_cursor());
        }
        // The listing continues after an instance it listed: instances are never deleted,
        // so one the project does not have is a cursor it did not hand out (not the end).
        if let Some(after) = &start.after {
            let id = InstanceId::parse(after.as_str()).map_err(|_| bad_cursor())?;
            app.ports
                .instances()
                .get_instance(&project.key().instance(id))
                .await
                .map_err(ApiError::store("reading an instance"))?
                .ok_or_else(bad_cursor)?;
        }
        let listing = PageRequest {
            cursor: start.after.clone(),
            limit: page.limit,
        };
        let instances = app
            .ports
            .instances()
            .list_instances(&project.key(), &listing)
            .await
            .map_err(ApiError::store("listing instances"))?;
        let ids: Vec<InstanceId> = instances.items.into_iter().map(|i| i.instance_id).collect();
        let (items, stop) = prices_page(&app, &project.key(), &ids, &start).await?;
        let after = |next: Option<String>| {
            next.map(|after| {
                Resume {
                    after: Some(after),
                    ..Resume::default()
                }
                .encode()
            })
        };
        let next = match stop {
            Stop::Done => after(instances.next),
            // The listing's own cursor right after the instances listed whole.
            Stop::Before(n) => {
                let listing = PageRequest {
                    cursor: start.after.clone(),
                    limit: n,
                };
                after(
                    app.ports
                        .instances()
                        .list_instances(&project.key(), &listing)
                        .await
                        .map_err(ApiError::store("listing instances"))?
                        .next,
                )
            }
            Stop::Within { calc, offset } => Some(
                Resume {
                    after: start.after.clone(),
                    index: 0,
                    calc: Some(calc),
                    offset,
                }
                .encode(),
            ),
        };
        return Ok(Json(json!({ "items": items, "next": next })));
    }
    // An instance asked for twice is listed once, where it was first asked for.
    let mut seen = std::collections::HashSet::new();
    let selected: Vec<&String> = selected.into_iter().filter(|s| seen.insert(*s)).collect();
    if start.after.is_some() || start.index >= selected.len() {
        return Err(bad_cursor());
    }
    let mut ids = Vec::new();
    for raw in selected {
        let unknown =
            || ApiError::bad_request(format!("instance {raw} does not exist in this project"));
        let id = InstanceId::parse(raw.as_str()).map_err(|_| unknown())?;
        let key = project.key().instance(id.clone());
        app.ports
            .instances()
            .get_instance(&key)
            .await
            .map_err(ApiError::store("reading an instance"))?
            .ok_or_else(unknown)?;
        ids.push(id);
    }
    // At most `limit` instances a page, as every listing.
    let end = ids.len().min(start.index.saturating_add(page.limit));
    let (items, stop) = prices_page(&app, &project.key(), &ids[start.index..end], &start).await?;
    let next = match stop {
        Stop::Done if end == ids.len() => None,
        Stop::Done => Some(
            Resume {
                index: end,
                ..Resume::default()
            }
            .encode(),
        ),
        Stop::Before(n) => Some(
            Resume {
                index: start.index + n,
                ..Resume::default()
            }
            .encode(),
        ),
        Stop::Within { calc, offset } => Some(
            Resume {
                index: start.index,
                calc: Some(calc),
                offset,
                ..Resume::default()
            }
            .encode(),
        ),
    };
    Ok(Json(json!({ "items": items, "next": next })))
}

/// GET .../items/{itemId}/priceHistory: every calculated price that changed the item's price
/// (its first included), with trigger and explanation.
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
    let first_page = page.cursor.is_none();
    // The cursor names a calculation (its sequence): one this listing handed out is before
    // the latest (a later entry followed it), so one at or past the latest is not ours.
    let cursor_sequence = page.cursor.as_deref().and_then(|c| c.parse::<u64>().ok());
    let key = instance.key();
    let (items, next) = store_page(
        page,
        |page| {
            let (app, key, item) = (&app, &key, &item);
            async move {
                app.ports
                    .prices()
                    .price_history(key, item, &page)
                    .await
                    .map_err(|e| match e {
                        // The stores answer a cursor they did not make with `NotFound`.
                        StoreError::NotFound => ApiError::bad_request(
                            "cursor is not one of this listing: use a `next` it returned",
                        ),
                        other => ApiError::store("reading price history")(other),
                    })
            }
        },
        |entry| serde_json::to_value(entry).unwrap_or_default(),
    )
    .await?;
    if let (Some(after), true) = (cursor_sequence, items.is_empty()) {
        let latest = app
            .ports
            .prices()
            .latest_prices_page(&key, 0, 0)
            .await
            .map_err(ApiError::store("reading prices"))?
            .map_or(0, |p| p.sequence);
        if after >= latest {
            return Err(ApiError::bad_request(
                "cursor is not one of this listing: use a `next` it returned",
            ));
        }
    }
    if first_page {
        // An item that never existed is a 404 (as its details are; a removed one's
        // history stays readable); an item without prices yet is an empty list. Later
        // pages follow a cursor of a listing that was allowed.
        let state = crate::instances::load_state(&app, &instance.key()).await?;
        if !state.items.contains_key(&item) {
            return Err(ApiError::not_found(format!(
                "item {item_id} does not exist"
            )));
        }
    }
    Ok(Json(json!({ "items": items, "next": next })))
}
