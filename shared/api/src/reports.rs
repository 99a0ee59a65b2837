//! POST /webhooks/errors: a receiver that queues our webhooks and fails on one later
//! reports it here; the report is kept with the delivery and shown in its log.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use pricing_core::ports::{DeliveryStore, ProjectStore, StoreError};
use pricing_core::validate::{Errors, codes, object};
use pricing_core::webhooks::ClientReport;
use pricing_core::webhooks::delivery::MAX_ERROR_LEN;
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody};
use crate::util::{now, reject_nulls, reject_unknown_fields};

/// Longest webhook id looked up (ours are 29 characters).
pub const MAX_WEBHOOK_ID_LEN: usize = 128;

/// A validated report: `{webhookId, message, status?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorReport {
    pub webhook_id: String,
    pub message: String,
    pub status: Option<u16>,
}

/// Reads a report; every problem is reported with its JSON Pointer.
pub fn parse_report(body: &Value) -> Result<ErrorReport, ApiError> {
    let mut errors = Errors::default();
    let Some(o) = object(body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    reject_unknown_fields(&o, &["webhookId", "message", "status"], &[], &mut errors);
    reject_nulls(&o, &[], &mut errors);
    let webhook_id = o.req_str("webhookId", &mut errors);
    if let Some(id) = webhook_id
        && (id.is_empty() || id.chars().count() > MAX_WEBHOOK_ID_LEN)
    {
        errors.push(
            "/webhookId",
            codes::RANGE,
            format!("must be 1 to {MAX_WEBHOOK_ID_LEN} characters long"),
        );
    }
    let message = o.req_str("message", &mut errors);
    match message.map(|m| m.chars().count()) {
        Some(0) => errors.push("/message", codes::RANGE, "must not be empty"),
        Some(n) if n > MAX_ERROR_LEN => errors.push(
            "/message",
            codes::TOO_LARGE,
            format!("has {n} characters; at most {MAX_ERROR_LEN}"),
        ),
        _ => {}
    }
    // An integer, also written with a zero fraction (500.0 is the integer 500 in JSON Schema).
    let status = match o.get("status") {
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            n.as_f64().map(|f| f as i64)
        }
        Some(Value::Number(_)) => {
            errors.push("/status", codes::RANGE, "must be an integer");
            None
        }
        Some(_) => {
            errors.push("/status", codes::TYPE, "must be an integer");
            None
        }
        None => None,
    };
    let status = match status {
        Some(s) if (100..=599).contains(&s) => u16::try_from(s).ok(),
        Some(_) => {
            errors.push(
                "/status",
                codes::RANGE,
                "must be an HTTP status code from 100 to 599",
            );
            None
        }
        None => None,
    };
    match (webhook_id, message) {
        (Some(webhook_id), Some(message)) if errors.is_empty() => Ok(ErrorReport {
            webhook_id: webhook_id.to_owned(),
            message: message.to_owned(),
            status,
        }),
        _ => Err(ApiError::validation(errors.list)),
    }
}

/// POST /webhooks/errors: 202 `{webhookId, accepted: true}`; an unknown webhook id, or one
/// sent for another tenant's project, is a 404.
pub async fn report_error<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = body
        .ok_or_else(|| ApiError::invalid_field("", codes::REQUIRED, "a JSON object is required"))?;
    let report = parse_report(&body)?;
    let not_found = || ApiError::not_found(format!("webhook {} does not exist", report.webhook_id));
    let delivery = app
        .ports
        .deliveries()
        .get_delivery(&report.webhook_id)
        .await
        .map_err(ApiError::store("reading a delivery"))?
        .ok_or_else(not_found)?;
    // Webhook ids are global: another tenant's delivery is not found.
    if delivery.tenant != caller.tenant {
        return Err(not_found());
    }
    let project = app
        .ports
        .projects()
        .get_project(&delivery.project())
        .await
        .map_err(ApiError::store("reading a project"))?;
    if project.is_none() {
        return Err(not_found());
    }
    let client_report = ClientReport {
        message: report.message,
        status: report.status,
        reported_at: now(),
    };
    match app
        .ports
        .deliveries()
        .add_client_report(&report.webhook_id, &client_report)
        .await
    {
        Ok(()) => {}
        Err(StoreError::NotFound) => return Err(not_found()),
        Err(e) => return Err(ApiError::store("storing an error report")(e)),
    }
    tracing::info!(
        project = %delivery.project_id,
        subscription = %delivery.subscription_id,
        webhook = %report.webhook_id,
        status = ?report.status,
        "webhook error reported"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "webhookId": report.webhook_id, "accepted": true })),
    ))
}
