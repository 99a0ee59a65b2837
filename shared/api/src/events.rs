//! GET /projects/{projectId}/instances/{instanceId}/events: an instance's events (the
//! bodies of its webhooks: `entries.rejected`, `prices.updated`, `instance.deactivated`),
//! so that a rejection whose webhook was lost is not lost with it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use pricing_core::ports::{DeliveryStore, StoreError};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{EventQuery, EventType, read_events};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, Path, parse_limit, single_valued};
use crate::instances::owned_instance;
use crate::paging::MAX_PAGE_BYTES;

/// The longest `cursor` (event ids are far shorter).
pub const MAX_CURSOR_LEN: usize = 256;

/// The query: `type` (repeatable), `since`, `until`, `cursor`, `limit` (each once).
fn event_query(query: &[(String, String)]) -> ApiResult<EventQuery> {
    single_valued(query, &[&["since"], &["until"], &["cursor"], &["limit"]])?;
    let mut q = EventQuery {
        types: Vec::new(),
        since: None,
        until: None,
        after: None,
        limit: 100,
        max_bytes: MAX_PAGE_BYTES,
    };
    let time = |name: &str, v: &str| {
        Timestamp::parse(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "{name} must be an RFC 3339 date-time (e.g. 2026-05-19T10:00:00Z)"
            ))
        })
    };
    for (k, v) in query {
        match k.as_str() {
            "type" => {
                let t = EventType::parse(v).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "type must be one of {}",
                        EventType::ALL.map(EventType::as_str).join(", ")
                    ))
                })?;
                if !q.types.iter().any(|x| x == t.as_str()) {
                    q.types.push(t.as_str().to_owned());
                }
            }
            "since" => q.since = Some(time("since", v)?),
            "until" => q.until = Some(time("until", v)?),
            "cursor" if !v.is_empty() => {
                if v.len() > MAX_CURSOR_LEN {
                    return Err(ApiError::bad_request(format!(
                        "cursor may have at most {MAX_CURSOR_LEN} characters"
                    )));
                }
                q.after = Some(v.clone());
            }
            "limit" => q.limit = parse_limit(v)?,
            _ => {}
        }
    }
    Ok(q)
}

/// GET .../events?type=&since=&until=&cursor=&limit=: the instance's events in creation
/// order, filtered; `{items, next}` where each item is an event as its webhook carries it
/// (`{id, type, createdAt, projectId, instanceId, data}`). The cursor is an event id: the
/// `next` of the previous page, or the `id` of any event of the instance the client has
/// (a webhook's envelope id), to read what came after it.
#[tracing::instrument(skip_all, fields(project = %project_id, instance = %instance_id))]
pub async fn list<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let key = instance.key();
    let mut q = event_query(&query)?;
    // A webhook's envelope id (`wh_...`, one event sent to one subscription) stands for
    // its event, so a receiver resumes from the last webhook it has.
    let webhook_cursor = q.after.clone().filter(|c| c.starts_with("wh_"));
    if let Some(webhook) = webhook_cursor.as_deref() {
        let delivery = app
            .ports
            .deliveries()
            .get_delivery(webhook)
            .await
            .map_err(ApiError::store("reading a delivery"))?
            .filter(|d| d.project() == key.project() && d.instance_id == key.instance_id);
        q.after = Some(match delivery {
            Some(d) => d.event.id,
            None => {
                return Err(ApiError::bad_request(format!(
                    "cursor {webhook} is not a webhook of this instance (or its delivery \
                     record is past retention): use a `next` of this listing or an event id"
                )));
            }
        });
    }
    let page = read_events(app.ports.events(), &key, &q)
        .await
        .map_err(|e| match e {
            // A manual trigger's resend carries a copy of its event under an id of its
            // own, which the log does not hold; or the event is past retention.
            StoreError::NotFound if webhook_cursor.is_some() => ApiError::bad_request(format!(
                "cursor {} is a webhook whose event the log does not hold: a manual \
                 trigger's resend (a copy under ids of its own) or an event past retention; \
                 resume from the original webhook's id or event id, or a `next` of this \
                 listing",
                webhook_cursor.as_deref().unwrap_or_default()
            )),
            StoreError::NotFound => ApiError::bad_request(
                "cursor is not an event of this instance: use a `next` of this listing or an \
                 event id (a webhook's id) of this instance",
            ),
            other => ApiError::store("reading events")(other),
        })?;
    Ok(Json(json!({ "items": page.items, "next": page.next })))
}
