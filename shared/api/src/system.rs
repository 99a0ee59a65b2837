//! Health, the OpenAPI document, signature keys and removed endpoints.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;

pub async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "apiVersion": pricing_core::API_VERSION }))
}

/// The OpenAPI 3.1 document of the routes that exist (kept in sync by a router test).
pub const OPENAPI: &str = include_str!("../openapi.json");

pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

/// GET /webhooks/signatureVerificationKeys: the keys that sign webhooks and stored entries.
pub async fn signature_keys<P: Ports>(
    State(app): State<Arc<App<P>>>,
    _caller: Caller,
) -> ApiResult<Json<Value>> {
    Ok(Json(app.keys.jwks()))
}

pub async fn gone_public_keys() -> ApiError {
    ApiError::gone(
        "public keys were removed in 3.0.0: the service no longer verifies entry signatures; \
         verify ours with GET /webhooks/signatureVerificationKeys",
    )
}

pub async fn gone_items() -> ApiError {
    ApiError::gone(
        "this endpoint was removed in 2.0.0: register items with itemRegistration entries at \
         POST /projects/{projectId}/instances/{instanceId}/entries",
    )
}

pub async fn gone_subprojects() -> ApiError {
    ApiError::gone("subprojects were removed in 3.0.0: create a project with POST /projects")
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such resource; see /openapi.json")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
