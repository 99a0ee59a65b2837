//! RFC 9457 problem responses: the one error type of the HTTP boundary.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use pricing_core::ports::StoreError;
use pricing_core::submit::MAX_REPORTED_ERRORS;
use pricing_core::validate::FieldError;
use serde_json::json;

/// `code` of a 422 for a create past a tenant's quota (projects, instances, subscriptions).
pub const QUOTA_EXCEEDED: &str = "quotaExceeded";
/// `code` of a 422 for a project-wide request over more instances than one request takes.
pub const TOO_MANY_INSTANCES: &str = "tooManyInstances";

/// An error answered to the client as `application/problem+json`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub title: &'static str,
    pub detail: String,
    pub errors: Vec<FieldError>,
    /// Extra headers (WWW-Authenticate, Retry-After).
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    pub fn new(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            title,
            detail: detail.into(),
            errors: Vec::new(),
            headers: Vec::new(),
        }
    }

    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.errors = errors;
        self
    }

    pub fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "Bad Request", detail)
    }

    /// 400 with one located error.
    pub fn invalid_field(pointer: &str, code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let detail = if pointer.is_empty() {
            message.clone()
        } else {
            format!("{pointer} {message}")
        };
        Self::bad_request(detail).with_errors(vec![FieldError {
            pointer: pointer.to_owned(),
            code: code.to_owned(),
            message,
        }])
    }

    /// 400 listing located errors; long lists are cut to the first
    /// [`MAX_REPORTED_ERRORS`] and the detail gives the full count.
    pub fn validation(mut errors: Vec<FieldError>) -> Self {
        let n = errors.len();
        let listed = if n > MAX_REPORTED_ERRORS {
            errors.truncate(MAX_REPORTED_ERRORS);
            format!(" (the first {MAX_REPORTED_ERRORS} are listed)")
        } else {
            String::new()
        };
        Self::bad_request(format!(
            "the request has {n} invalid field{}{listed}; nothing was stored",
            if n == 1 { "" } else { "s" }
        ))
        .with_errors(errors)
    }

    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", detail)
            .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
    }

    /// A 401 for a token that was sent and refused (bad, expired, naming no tenant):
    /// `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750 section 3.1).
    pub fn invalid_token(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", detail).with_header(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer error=\"invalid_token\""),
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found", detail)
    }

    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "Conflict", detail)
    }

    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Content",
            detail,
        )
    }

    /// 422 with one located error: a valid request that breaks a rule with a `code`.
    pub fn rule(pointer: &str, code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::unprocessable(message.clone()).with_errors(vec![FieldError {
            pointer: pointer.to_owned(),
            code: code.to_owned(),
            message,
        }])
    }

    /// 422 `quotaExceeded`: a create past a quota; nothing was created.
    pub fn quota_exceeded(message: impl Into<String>) -> Self {
        Self::rule("", QUOTA_EXCEEDED, message)
    }

    pub fn gone(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "Gone", detail)
    }

    /// 408: the request body did not arrive within `timeout`.
    pub fn body_timeout(timeout: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "Request Timeout",
            format!(
                "the body did not arrive within {} s; send it again",
                timeout.as_secs_f64()
            ),
        )
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 400: the body's framing is broken (a chunk that does not read, a connection closed
    /// before the declared length): not a size problem, and the connection cannot be
    /// read further.
    pub fn broken_body() -> Self {
        Self::bad_request(
            "the body does not read: its framing is broken (chunked encoding, or a Content-Length it does not fill)",
        )
        .with_header(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 412: a precondition of the request (`If-Match`) does not hold; nothing changed.
    pub fn precondition_failed(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "Precondition Failed",
            detail,
        )
    }

    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Content Too Large", detail)
    }

    pub fn unsupported_media_type(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type",
            detail,
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
            "this method is not allowed on this path; see /openapi.json",
        )
    }

    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Too Many Requests",
            "the request rate of this tenant is over its limit",
        )
        .with_header(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs.max(1)),
        )
    }

    /// A failure of ours: logged with a correlation id that the client sees; internals stay
    /// in the log.
    pub fn internal(context: &str, error: &dyn std::fmt::Display) -> Self {
        let correlation = ulid::Ulid::new().to_string();
        tracing::error!(%correlation, context, %error, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error",
            format!("the request failed on our side; correlation id {correlation}"),
        )
    }

    pub fn unavailable(context: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::warn!(context, %error, "storage unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            "storage is unavailable for now (busy, or out of space); retry shortly",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    }

    /// Maps a storage error met while doing `context`.
    pub fn store(context: &'static str) -> impl FnOnce(StoreError) -> ApiError {
        move |e| match e {
            StoreError::Unavailable(_) => ApiError::unavailable(context, &e),
            StoreError::NotFound => ApiError::not_found(format!("{context}: not found")),
            StoreError::Conflict(_) | StoreError::Failed(_) => ApiError::internal(context, &e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({
            "type": "about:blank",
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if !self.errors.is_empty() {
            body["errors"] = serde_json::to_value(&self.errors).unwrap_or_default();
        }
        let mut response = (self.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    async fn render(e: ApiError) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let r = e.into_response();
        let (status, headers) = (r.status(), r.headers().clone());
        let body = to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, headers, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_500_names_a_correlation_id_and_hides_internals() {
        let e = StoreError::Failed("disk I/O error at /var/secret/path".into());
        let (status, headers, body) = render(ApiError::store("reading a project")(e)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(headers["content-type"], "application/problem+json");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("correlation id"), "{detail}");
        assert!(!body.to_string().contains("/var/secret"), "{body}");
    }

    #[tokio::test]
    async fn busy_storage_is_a_503_with_retry_after() {
        let e = StoreError::Unavailable("database is locked".into());
        let (status, headers, body) = render(ApiError::store("appending entries")(e)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["retry-after"], "1");
        assert!(!body.to_string().contains("locked"));
    }
}
