//! Health, the OpenAPI document, signature keys and removed endpoints.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;

pub async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "apiVersion": pricing_core::API_VERSION }))
}

/// The OpenAPI 3.1 document of the routes that exist (kept in sync by the tests).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The same document as the binaries embed it: gzip (build.rs).
pub const OPENAPI_GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.gz"));

pub async fn openapi(headers: HeaderMap) -> Response {
    crate::gzip::respond(OPENAPI_GZ, "application/json", &headers)
}

/// GET /webhooks/signatureVerificationKeys: the keys that sign webhooks and stored entries.
pub async fn signature_keys<P: Ports>(
    State(app): State<Arc<App<P>>>,
    _caller: Caller,
) -> ApiResult<Json<Value>> {
    Ok(Json(app.keys.jwks()))
}

/// A removed endpoint: its documented methods answer 410 naming the replacement; any other
/// method is a 405 with `Allow` (HEAD goes with GET), as on every other path.
fn removed(method: &Method, methods: &[Method], allow: &'static str, detail: &str) -> ApiError {
    let documented =
        methods.contains(method) || (*method == Method::HEAD && methods.contains(&Method::GET));
    if documented {
        ApiError::gone(detail)
    } else {
        ApiError::method_not_allowed().with_header(header::ALLOW, HeaderValue::from_static(allow))
    }
}

/// GET and POST /projects/{projectId}/publicKeys (removed in 3.0.0).
pub async fn gone_public_keys(method: Method) -> ApiError {
    removed(
        &method,
        &[Method::GET, Method::POST],
        "GET,HEAD,POST",
        "public keys were removed in 3.0.0: the service no longer verifies entry signatures; \
         verify ours with GET /webhooks/signatureVerificationKeys",
    )
}

/// POST /projects/{projectId}/instances/{instanceId}/items (removed in 2.0.0): the fallback
/// of the GET route, so it sees every method but GET and HEAD.
pub async fn gone_items(method: Method) -> ApiError {
    removed(
        &method,
        &[Method::POST],
        "GET,HEAD,POST",
        "this endpoint was removed in 2.0.0: register items with itemRegistration entries at \
         POST /projects/{projectId}/instances/{instanceId}/entries",
    )
}

/// POST /projects/{projectId}/subprojects (removed in 3.0.0).
pub async fn gone_subprojects(method: Method) -> ApiError {
    removed(
        &method,
        &[Method::POST],
        "POST",
        "subprojects were removed in 3.0.0: create a project with POST /projects",
    )
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such resource; see /openapi.json")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
