//! The HTTP API as an axum `Router`, generic over the ports: served by `axum::serve` in the
//! standalone process and by `lambda_http` on AWS.

pub mod app;
pub mod auth;
pub mod console;
pub mod entries;
pub mod error;
pub mod events;
pub mod extract;
pub mod gzip;
pub mod instances;
pub mod matches;
pub mod metrics;
pub mod paging;
pub mod prices;
pub mod projects;
pub mod reports;
pub mod simulations;
pub mod subscriptions;
pub mod summaries;
pub mod system;
pub mod util;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use tracing::Instrument;

pub use app::{App, Limits, Ports, Stores};
pub use error::ApiError;

/// Every route: (method, path). The OpenAPI document must describe exactly these; the 410
/// routes answer any method and are listed with their documented method.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/health"),
    ("GET", "/openapi.json"),
    ("GET", "/webhooks/signatureVerificationKeys"),
    ("POST", "/projects"),
    ("GET", "/projects"),
    ("GET", "/projects/{projectId}"),
    ("POST", "/projects/{projectId}/instances"),
    ("GET", "/projects/{projectId}/instances"),
    ("GET", "/projects/{projectId}/instances/{instanceId}"),
    ("PUT", "/projects/{projectId}/instances/{instanceId}"),
    ("GET", "/projects/{projectId}/instances/{instanceId}/items"),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/items/{itemId}",
    ),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/products",
    ),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/products/{productId}",
    ),
    (
        "POST",
        "/projects/{projectId}/instances/{instanceId}/entries",
    ),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/entries",
    ),
    ("GET", "/projects/{projectId}/instances/{instanceId}/events"),
    ("POST", "/projects/{projectId}/calculatePrices"),
    ("GET", "/projects/{projectId}/instancePrices"),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/items/{itemId}/priceHistory",
    ),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/priceMatches",
    ),
    (
        "POST",
        "/projects/{projectId}/instances/{instanceId}/priceMatches",
    ),
    (
        "DELETE",
        "/projects/{projectId}/instances/{instanceId}/priceMatches/{matchId}",
    ),
    ("GET", "/projects/{projectId}/subscriptions"),
    ("POST", "/projects/{projectId}/subscriptions"),
    (
        "GET",
        "/projects/{projectId}/instances/{instanceId}/subscriptions",
    ),
    (
        "POST",
        "/projects/{projectId}/instances/{instanceId}/subscriptions",
    ),
    (
        "DELETE",
        "/projects/{projectId}/subscriptions/{subscriptionId}",
    ),
    (
        "POST",
        "/projects/{projectId}/subscriptions/{subscriptionId}/trigger",
    ),
    (
        "POST",
        "/projects/{projectId}/subscriptions/{subscriptionId}/secret",
    ),
    (
        "GET",
        "/projects/{projectId}/subscriptions/{subscriptionId}/deliveries",
    ),
    ("POST", "/webhooks/errors"),
    ("POST", "/simulations"),
    ("POST", "/projects/{projectId}/publicKeys"),
    ("GET", "/projects/{projectId}/publicKeys"),
    ("POST", "/projects/{projectId}/instances/{instanceId}/items"),
    ("POST", "/projects/{projectId}/subprojects"),
];

/// The whole API over `app` (the standalone serves it).
pub fn router<P: Ports>(app: Arc<App<P>>) -> Router {
    finish(
        entry_routes::<P>()
            .merge(management_routes::<P>())
            .merge(simulation_routes::<P>()),
        app,
    )
}

/// The entries-api function's part of the API: the entry log, submitted and read. On AWS
/// the gateway routes only this path to that function (template.yaml), so it links
/// nothing else (its bootstrap stays within the size budget).
pub fn entries_router<P: Ports>(app: Arc<App<P>>) -> Router {
    finish(entry_routes::<P>(), app)
}

/// The management-api function's part of the API: every route but the entry log and
/// `POST /simulations`.
pub fn management_router<P: Ports>(app: Arc<App<P>>) -> Router {
    finish(management_routes::<P>(), app)
}

/// The simulations-api function's part of the API: `POST /simulations` alone. On AWS the
/// gateway routes it to that function (template.yaml), so the management-api links no
/// market simulator (its bootstrap stays within the size budget), and a simulation, which
/// is CPU-bound, runs on a function sized for it.
pub fn simulations_router<P: Ports>(app: Arc<App<P>>) -> Router {
    finish(simulation_routes::<P>(), app)
}

fn simulation_routes<P: Ports>() -> Router<Arc<App<P>>> {
    // A market scenario simulated (issue 14's simulation page; docs/api.md).
    Router::new().route("/simulations", post(simulations::run::<P>))
}

fn entry_routes<P: Ports>() -> Router<Arc<App<P>>> {
    Router::new().route(
        "/projects/{projectId}/instances/{instanceId}/entries",
        get(entries::log::<P>).post(entries::submit::<P>),
    )
}

/// Unknown paths and methods, and the layers every answer goes through.
fn finish<P: Ports>(routes: Router<Arc<App<P>>>, app: Arc<App<P>>) -> Router {
    routes
        .fallback(system::not_found)
        .method_not_allowed_fallback(system::method_not_allowed)
        .layer(middleware::from_fn(identity_bodies))
        .layer(middleware::from_fn(no_entity_tags))
        .layer(middleware::from_fn(api_version))
        .layer(middleware::from_fn(access_log))
        .layer(middleware::from_fn(request_id))
        .with_state(app)
}

/// `router` with the request id and the access log of the API's own routes: for a route a
/// deployment adds beside them (the standalone's `POST /oauth2/token`), so that its
/// answers carry `x-request-id` and its log lines the request's span.
pub fn traced(router: Router) -> Router {
    router
        .layer(middleware::from_fn(access_log))
        .layer(middleware::from_fn(request_id))
}

fn management_routes<P: Ports>() -> Router<Arc<App<P>>> {
    Router::new()
        .route("/health", get(system::health))
        .route("/openapi.json", get(system::openapi))
        .route(
            "/webhooks/signatureVerificationKeys",
            get(system::signature_keys::<P>),
        )
        .route(
            "/projects",
            get(projects::list::<P>).post(projects::create::<P>),
        )
        .route("/projects/{projectId}", get(projects::get::<P>))
        .route(
            "/projects/{projectId}/instances",
            get(instances::list::<P>).post(instances::create::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}",
            get(instances::details::<P>).put(instances::update::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/items",
            // POST (and every other method) stays removed (2.0.0).
            get(summaries::list_items::<P>).fallback(system::gone_items),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/items/{itemId}",
            get(instances::item::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/products",
            get(summaries::list_products::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/products/{productId}",
            get(instances::product::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/events",
            get(events::list::<P>),
        )
        .route(
            "/projects/{projectId}/calculatePrices",
            post(prices::calculate::<P>),
        )
        .route(
            "/projects/{projectId}/instancePrices",
            get(prices::instance_prices::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/items/{itemId}/priceHistory",
            get(prices::price_history::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/priceMatches",
            get(matches::list::<P>).post(matches::create::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/priceMatches/{matchId}",
            delete(matches::delete::<P>),
        )
        .route(
            "/projects/{projectId}/subscriptions",
            get(subscriptions::list_project_level::<P>)
                .post(subscriptions::create_project_level::<P>),
        )
        .route(
            "/projects/{projectId}/instances/{instanceId}/subscriptions",
            get(subscriptions::list_instance_level::<P>)
                .post(subscriptions::create_instance_level::<P>),
        )
        .route(
            "/projects/{projectId}/subscriptions/{subscriptionId}",
            delete(subscriptions::delete::<P>),
        )
        .route(
            "/projects/{projectId}/subscriptions/{subscriptionId}/trigger",
            post(subscriptions::trigger::<P>),
        )
        .route(
            "/projects/{projectId}/subscriptions/{subscriptionId}/secret",
            post(subscriptions::rotate_secret::<P>),
        )
        .route(
            "/projects/{projectId}/subscriptions/{subscriptionId}/deliveries",
            get(subscriptions::deliveries::<P>),
        )
        .route("/webhooks/errors", post(reports::report_error::<P>))
        .route(
            "/projects/{projectId}/publicKeys",
            any(system::gone_public_keys),
        )
        .route(
            "/projects/{projectId}/subprojects",
            any(system::gone_subprojects),
        )
        // The web console's static files (issue 14): no token, the API calls carry one.
        .merge(console::routes())
}

/// The request id header: the caller's own, or one the service makes up.
pub const REQUEST_ID: &str = "x-request-id";

/// Whether `id` may be a request id as the caller sent it: 1 to 128 characters of
/// `A-Z a-z 0-9 . _ : -` (nothing that could forge a log line or a header).
pub fn is_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Gives every request an id, the caller's `x-request-id` when it is a plain token, else a
/// new ULID: every log line about the request carries it (the `request` span around
/// everything the request does), and the response returns it in `x-request-id`. On
/// Lambda the same lines also carry the runtime's requestId and xrayTraceId, which the
/// queued work continues (docs/operations.md, "Tracing").
async fn request_id(mut request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_request_id(v))
        .and_then(|v| HeaderValue::from_str(v).ok());
    let value = match given {
        Some(v) => v,
        None => match HeaderValue::from_str(&ulid::Ulid::new().to_string()) {
            Ok(v) => v,
            Err(_) => return next.run(request).await,
        },
    };
    let span = tracing::info_span!("request", request_id = value.to_str().unwrap_or_default());
    request.headers_mut().insert(REQUEST_ID, value.clone());
    let mut response = next.run(request).instrument(span).await;
    response.headers_mut().insert(REQUEST_ID, value);
    response
}

/// Checks a requested `Api-Version` (3, 3.1 or 3.1.0; older minors of 3 are fine) and
/// stamps every response with ours. Public for the routes outside this router (the
/// standalone's `/oauth2/token`).
pub async fn api_version(request: Request, next: Next) -> Response {
    // Several field lines mean what one comma-joined line does (RFC 9110 section 5.3):
    // each version named must be one we implement, whatever the order of the lines.
    let lines: Vec<&str> = request
        .headers()
        .get_all("api-version")
        .iter()
        .map(|v| v.to_str().unwrap_or("?"))
        .collect();
    let requested = (!lines.is_empty()).then(|| lines.join(", "));
    let mut response = match requested {
        Some(v) if !v.split(',').all(version_supported) => ApiError::bad_request(format!(
            "Api-Version {} is not supported; this service implements {}",
            pricing_core::process::rejected::capped(&v, 64),
            pricing_core::API_VERSION
        ))
        .into_response(),
        _ => next.run(request).await,
    };
    response.headers_mut().insert(
        "api-version",
        HeaderValue::from_static(pricing_core::API_VERSION),
    );
    response
}

/// Request bodies are read as sent: a body with a content coding (gzip, br, ...) is a 415
/// (RFC 9110 section 15.5.16) rather than JSON that does not parse, or a coded label on a
/// plain body taken at its word.
async fn identity_bodies(request: Request, next: Next) -> Response {
    let coded = request
        .headers()
        .get_all(axum::http::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .map(str::to_owned);
    match coded {
        Some(coding) => ApiError::unsupported_media_type(format!(
            "Content-Encoding {coding} is not supported: send the body without a content coding"
        ))
        .into_response(),
        None => next.run(request).await,
    }
}

/// The service sends no entity tags, so an `If-Match` naming one can match no current
/// representation: a request that changes something under such a condition is a 412 and
/// changes nothing (RFC 9110 section 13.1.1), where it was carried out as if unconditional
/// (a client relying on it lost updates silently). `If-Match: *` is left to the request.
async fn no_entity_tags(request: Request, next: Next) -> Response {
    let changes = !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    let tagged = request
        .headers()
        .get_all(axum::http::header::IF_MATCH)
        .iter()
        .any(|v| v.to_str().map_or(true, |v| v.trim() != "*"));
    if changes && tagged {
        return ApiError::precondition_failed(
            "If-Match names an entity tag, and this service sends none: no representation matches it; send the request without If-Match",
        )
        .into_response();
    }
    next.run(request).await
}

/// Same major, and a minor we implement.
pub fn version_supported(v: &str) -> bool {
    let parts: Vec<&str> = v.trim().split('.').collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
        return false;
    }
    let num = |i: usize| parts.get(i).map(|p| p.parse::<u32>().unwrap_or(u32::MAX));
    num(0) == Some(3) && num(1).is_none_or(|minor| minor <= 1)
}

/// One structured line per request: method, route, status, latency. No bodies, no tokens.
async fn access_log(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let method: Method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let micros = start.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(%method, route, status, micros, "request");
    } else {
        tracing::debug!(%method, route, status, micros, "request");
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_plain_tokens() {
        for ok in ["a", "01JABCDEF", "req-1.2_3:4", &"x".repeat(128)] {
            assert!(is_request_id(ok), "{ok}");
        }
        for bad in ["", "a b", "a\nb", "é", "a/b", "<x>", &"x".repeat(129)] {
            assert!(!is_request_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn api_versions() {
        for ok in ["3", "3.1", "3.1.0", "3.0", "3.0.2", "3.1.7"] {
            assert!(version_supported(ok), "{ok}");
        }
        for bad in ["2", "4", "3.2", "3.2.0", "x", "", "3.1.0.1", "v3"] {
            assert!(!version_supported(bad), "{bad}");
        }
    }
}
