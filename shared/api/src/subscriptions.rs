//! Webhook subscriptions (DESIGN.md section 7): at project level (every instance) or
//! instance level, at most `Quotas::subscriptions_per_scope` per scope; a subscription's
//! manual trigger, its delivery log and its signing secret. The secret is shown twice
//! only: in the creation response and in the response of a rotation.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use pricing_core::ids::{InstanceId, ProjectKey, SubscriptionId};
use pricing_core::model::Message;
use pricing_core::ports::{DeliveryStore, Enqueue, StoreError, SubscriptionStore};
use pricing_core::validate::{Errors, codes, object};
use pricing_core::webhooks::{
    DeliverySummary, NewSubscription, Subscription, SubscriptionStatus, WebhookSecret,
};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, Path, bad_cursor, cursor_id, page_request};
use crate::instances::owned_instance;
use crate::paging::store_page;
use crate::projects::owned_project;
use crate::util::{now, reject_nulls};

/// `Cache-Control: no-store` on the answers that carry a subscription's secret (shown only
/// there): no cache between the client and the service may keep it (RFC 9111 section
/// 5.2.2.5), as the token endpoint's answers say for a token.
type NoStore = [(axum::http::HeaderName, &'static str); 1];
const NO_STORE: NoStore = [(axum::http::header::CACHE_CONTROL, "no-store")];

/// A subscription as listings and reads show it: never with its secrets (they are not
/// part of its serialized form).
pub fn subscription_view(s: &Subscription) -> Value {
    let mut view = serde_json::to_value(s).unwrap_or_default();
    // The owner is the caller; it is stored, never shown.
    if let Some(fields) = view.as_object_mut() {
        fields.remove("tenant");
    }
    view
}

/// A subscription of the caller's project, or 404.
async fn owned_subscription<P: Ports>(
    app: &App<P>,
    caller: &Caller,
    project_id: &str,
    subscription_id: &str,
) -> ApiResult<Subscription> {
    let project = owned_project(app, caller, project_id).await?;
    let not_found =
        || ApiError::not_found(format!("subscription {subscription_id} does not exist"));
    let id = SubscriptionId::parse(subscription_id).map_err(|_| not_found())?;
    app.ports
        .subscriptions()
        .get_subscription(&project.key(), &id)
        .await
        .map_err(ApiError::store("reading a subscription"))?
        .ok_or_else(not_found)
}

/// Validates the body and stores the subscription in its scope, unless the scope is full.
async fn create_in_scope<P: Ports>(
    app: &App<P>,
    project: ProjectKey,
    instance_id: Option<InstanceId>,
    body: Option<Value>,
) -> ApiResult<(StatusCode, NoStore, Json<Value>)> {
    let body = body
        .ok_or_else(|| ApiError::invalid_field("", codes::REQUIRED, "a JSON object is required"))?;
    let mut errors = Errors::default();
    if let Some(o) = object(&body, "", &mut errors) {
        reject_nulls(&o, &[], &mut errors);
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors.list));
    }
    let request =
        NewSubscription::parse(&body, &app.callback_policy).map_err(ApiError::validation)?;
    let subscription = request.into_subscription(project, instance_id, now());
    let max = usize::try_from(app.limits.quotas.subscriptions_per_scope).unwrap_or(usize::MAX);
    let stored = app
        .ports
        .subscriptions()
        .create_subscription(&subscription, max)
        .await
        .map_err(ApiError::store("creating a subscription"))?;
    if !stored {
        let scope = match &subscription.instance_id {
            Some(i) => format!("instance {i}"),
            None => format!("project {} (project level)", subscription.project_id),
        };
        return Err(ApiError::quota_exceeded(format!(
            "{scope} already has {max} subscriptions, the most a project or an instance may \
             have; delete one first"
        )));
    }
    tracing::info!(
        project = %subscription.project_id,
        instance = subscription.instance_id.as_ref().map(InstanceId::as_str),
        subscription = %subscription.subscription_id,
        "subscription created"
    );
    let mut view = subscription_view(&subscription);
    if let (Some(obj), Some(secrets)) = (view.as_object_mut(), &subscription.secrets) {
        obj.insert("secret".into(), Value::String(secrets.current.reveal()));
    }
    Ok((StatusCode::CREATED, NO_STORE, Json(view)))
}

/// A scope's subscriptions in id order, paged as every listing is (`?cursor=&limit=`): the
/// cursor is the last id of the previous page, so a page after a deletion goes on from
/// where it was. A scope holds at most the subscription quota (20 by default), so with
/// that default and without `limit` a listing is one page.
async fn list_scope<P: Ports>(
    app: &App<P>,
    project: &ProjectKey,
    instance: Option<&InstanceId>,
    query: &[(String, String)],
) -> ApiResult<Json<Value>> {
    let page = page_request(query)?;
    // Subscription ids are generated ULIDs: a cursor of any other form names no position
    // this listing could have handed out.
    if let Some(c) = cursor_id::<SubscriptionId>(&page)?
        && ulid::Ulid::from_string(c.as_str()).is_err()
    {
        return Err(bad_cursor(c.as_str()));
    }
    let mut items = app
        .ports
        .subscriptions()
        .list_subscriptions(project, instance)
        .await
        .map_err(ApiError::store("listing subscriptions"))?;
    items.sort_by(|a, b| a.subscription_id.as_str().cmp(b.subscription_id.as_str()));
    let rest: Vec<&Subscription> = items
        .iter()
        .filter(|s| {
            page.cursor
                .as_deref()
                .is_none_or(|c| s.subscription_id.as_str() > c)
        })
        .collect();
    let shown = &rest[..rest.len().min(page.limit)];
    let next = (shown.len() < rest.len())
        .then(|| shown.last().map(|s| s.subscription_id.as_str().to_owned()))
        .flatten();
    let items: Vec<Value> = shown.iter().map(|s| subscription_view(s)).collect();
    Ok(Json(json!({ "items": items, "next": next })))
}

/// POST /projects/{projectId}/subscriptions: a project-level subscription.
pub async fn create_project_level<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, NoStore, Json<Value>)> {
    let project = owned_project(&app, &caller, &project_id).await?;
    create_in_scope(&app, project.key(), None, body).await
}

/// GET /projects/{projectId}/subscriptions: the project-level subscriptions.
pub async fn list_project_level<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path(project_id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let project = owned_project(&app, &caller, &project_id).await?;
    list_scope(&app, &project.key(), None, &query).await
}

/// POST /projects/{projectId}/instances/{instanceId}/subscriptions.
pub async fn create_instance_level<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, NoStore, Json<Value>)> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    create_in_scope(
        &app,
        instance.key().project(),
        Some(instance.instance_id),
        body,
    )
    .await
}

/// GET /projects/{projectId}/instances/{instanceId}/subscriptions: that instance's own
/// subscriptions (the project-level ones are listed on the project).
pub async fn list_instance_level<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    list_scope(
        &app,
        &instance.key().project(),
        Some(&instance.instance_id),
        &query,
    )
    .await
}

/// DELETE /projects/{projectId}/subscriptions/{subscriptionId}: either level.
pub async fn delete<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, subscription_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let project = owned_project(&app, &caller, &project_id).await?;
    let not_found =
        || ApiError::not_found(format!("subscription {subscription_id} does not exist"));
    let id = SubscriptionId::parse(subscription_id.as_str()).map_err(|_| not_found())?;
    let deleted = app
        .ports
        .subscriptions()
        .delete_subscription(&project.key(), &id)
        .await
        .map_err(ApiError::store("deleting a subscription"))?;
    if !deleted {
        return Err(not_found());
    }
    tracing::info!(project = %project.project_id, subscription = %id, "subscription deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// POST /projects/{projectId}/subscriptions/{subscriptionId}/trigger: resend the latest
/// prices of the subscription's scope to it alone (the webhook lane does the work).
pub async fn trigger<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, subscription_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let subscription = owned_subscription(&app, &caller, &project_id, &subscription_id).await?;
    crate::util::no_fields(body.as_ref())?;
    if subscription.status != SubscriptionStatus::Active {
        return Err(ApiError::unprocessable(format!(
            "subscription {} is disabled{}; create a new subscription to receive webhooks again",
            subscription.subscription_id,
            subscription
                .disabled_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )));
    }
    let trigger_id = format!("trg_{}", ulid::Ulid::new());
    app.ports
        .queue()
        .send(&Message::Trigger {
            project: subscription.project(),
            subscription_id: subscription.subscription_id.clone(),
            trigger_id: trigger_id.clone(),
            instance_id: None,
            cursor: None,
        })
        .await
        .map_err(ApiError::store("enqueueing a trigger"))?;
    tracing::info!(
        project = %subscription.project_id,
        subscription = %subscription.subscription_id,
        trigger = %trigger_id,
        "manual trigger requested"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "subscriptionId": subscription.subscription_id,
            "triggerId": trigger_id,
        })),
    ))
}

/// POST /projects/{projectId}/subscriptions/{subscriptionId}/secret: a new signing secret,
/// shown in this response only. The replaced one keeps signing beside it (a second `v1`
/// signature) until `previousSecretExpiresAt`; an older one stops at once.
pub async fn rotate_secret<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, subscription_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(NoStore, Json<Value>)> {
    let subscription = owned_subscription(&app, &caller, &project_id, &subscription_id).await?;
    crate::util::no_fields(body.as_ref())?;
    let not_found =
        || ApiError::not_found(format!("subscription {subscription_id} does not exist"));
    let secrets = app
        .ports
        .subscriptions()
        .rotate_subscription_secret(
            &subscription.project(),
            &subscription.subscription_id,
            &WebhookSecret::generate(),
            now(),
        )
        .await
        .map_err(|e| match e {
            // Deleted since it was read.
            StoreError::NotFound => not_found(),
            e => ApiError::store("rotating a subscription secret")(e),
        })?;
    tracing::info!(
        project = %subscription.project_id,
        subscription = %subscription.subscription_id,
        previous_until = secrets.previous_until.map(|t| t.to_rfc3339()).as_deref(),
        "subscription secret rotated"
    );
    Ok((
        NO_STORE,
        Json(json!({
        "subscriptionId": subscription.subscription_id,
        "secret": secrets.current.reveal(),
        "previousSecretExpiresAt": secrets.previous_until,
        })),
    ))
}

/// GET /projects/{projectId}/subscriptions/{subscriptionId}/deliveries: newest first, one
/// record per webhook with its attempts and the receiver's error reports.
pub async fn deliveries<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, subscription_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let subscription = owned_subscription(&app, &caller, &project_id, &subscription_id).await?;
    let page = page_request(&query)?;
    // A delivery carries its attempts and up to 20 reports of 1,000 characters: the page
    // is bounded by bytes too.
    let (items, next) = store_page(
        page,
        |page| {
            let (app, subscription) = (&app, &subscription);
            async move {
                app.ports
                    .deliveries()
                    .list_deliveries(
                        &subscription.project(),
                        &subscription.subscription_id,
                        &page,
                    )
                    .await
                    .map_err(|e| match (e, &page.cursor) {
                        // A cursor this listing did not hand out.
                        (StoreError::NotFound, Some(cursor)) => ApiError::bad_request(format!(
                            "cursor {cursor} is not a cursor of this listing"
                        )),
                        (e, _) => ApiError::store("listing deliveries")(e),
                    })
            }
        },
        DeliverySummary::view,
    )
    .await?;
    Ok(Json(json!({ "items": items, "next": next })))
}
