//! `POST /oauth2/token`: the client-credentials grant of the standalone service (RFC 6749
//! section 4.4). Credentials come in the form or as HTTP Basic.

use std::sync::Arc;

use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Json, Router};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use pricing_api::auth::LocalTokens;
use pricing_api::extract::{BodyFailure, read_body};
use serde::Deserialize;
use serde_json::json;

use crate::datadir::Clients;

/// Lifetime of tokens from this endpoint.
pub const TOKEN_TTL_SECS: i64 = 3_600;

/// The largest token request form read: its parameters are an id, a secret, a grant type
/// and a scope, a few hundred bytes.
pub const MAX_FORM_BYTES: usize = 8 * 1024;

pub struct TokenEndpoint {
    pub tokens: Arc<LocalTokens>,
    pub clients: Clients,
    /// How long the form may take to arrive (the API's `--body-timeout`): 408 after.
    pub body_timeout: std::time::Duration,
}

#[derive(Debug, Deserialize)]
pub struct TokenForm {
    grant_type: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
}

/// The token route. Like every route of the API it answers with `Api-Version` and refuses
/// a requested version it does not implement (400); it sits outside the API router, whose
/// layers do not reach it.
pub fn router(endpoint: Arc<TokenEndpoint>) -> Router {
    Router::new()
        .route("/oauth2/token", post(token))
        .method_not_allowed_fallback(pricing_api::system::method_not_allowed)
        .layer(middleware::from_fn(pricing_api::api_version))
        .with_state(endpoint)
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let mut response = (
        status,
        Json(json!({ "error": error, "error_description": description })),
    )
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"oauth2\""),
        );
    }
    response
}

/// The HTTP Basic credentials of a request: `None` without a Basic `Authorization` header,
/// `Some(None)` with one that does not decode to `client_id:client_secret`.
fn basic_credentials(headers: &HeaderMap) -> Option<Option<(String, String)>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    Some(decoded.and_then(|d| {
        d.split_once(':')
            .map(|(id, secret)| (id.to_owned(), secret.to_owned()))
    }))
}

async fn token(State(endpoint): State<Arc<TokenEndpoint>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    // Two Authorization or Content-Type headers say two things (which credentials, what
    // the body is): refused, as the API refuses them, rather than one picked.
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
        if parts.headers.get_all(&name).iter().nth(1).is_some() {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("the request has more than one {name} header"),
            );
        }
    }
    // A media type is case-insensitive (RFC 9110 section 8.3.1); the form extractor
    // matches it as written, so `APPLICATION/X-WWW-FORM-URLENCODED` was refused.
    // One media type only: `a, b` joined in one header is refused as two headers are.
    let essence = parts.headers.get(header::CONTENT_TYPE).map(|v| {
        v.to_str()
            .ok()
            .and_then(pricing_api::extract::media_type_essence)
    });
    if let Some(None) = essence {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the Content-Type is not one media type: send application/x-www-form-urlencoded",
        );
    }
    let is_form = essence
        .flatten()
        .is_some_and(|essence| essence == "application/x-www-form-urlencoded");
    if !is_form {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "send application/x-www-form-urlencoded with grant_type=client_credentials",
        );
    }
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    // A token request is a few hundred bytes, and anyone may send one: a body declared
    // larger than a form may be is refused before it is read (and before a client that
    // asked `Expect: 100-continue` is told to send it), and no more is read than that
    // (an outside probe held 2 MiB per connection, 3 GB with 1,000 of them).
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let too_large = || {
        oauth_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request",
            &format!("the form may hold at most {MAX_FORM_BYTES} bytes"),
        )
    };
    if declared.is_some_and(|n| n > MAX_FORM_BYTES as u64) {
        return too_large();
    }
    let headers = parts.headers.clone();
    let bytes = match read_body(body, MAX_FORM_BYTES, endpoint.body_timeout).await {
        Ok(bytes) => bytes,
        Err(BodyFailure::TooLarge) => return too_large(),
        Err(failure) => {
            let mut response = if failure == BodyFailure::TimedOut {
                oauth_error(
                    StatusCode::REQUEST_TIMEOUT,
                    "invalid_request",
                    "the form did not arrive in time",
                )
            } else {
                oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "the body does not read: its framing is broken",
                )
            };
            response.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            return response;
        }
    };
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    let form = match Form::<TokenForm>::from_request(request, &()).await {
        Ok(Form(form)) => form,
        // A form that does not read: a parameter given twice (RFC 6749 section 3.2), say.
        Err(rejection) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!(
                    "the form does not read (each parameter at most once): {}",
                    rejection.body_text()
                ),
            );
        }
    };
    match form.grant_type.as_deref() {
        Some("client_credentials") => {}
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only grant_type=client_credentials is supported",
            );
        }
        None => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type is required",
            );
        }
    }
    // One way of authenticating per request (RFC 6749, section 2.3): Basic or the form.
    // A Basic header counts as a method whether or not it decodes (one that did not was
    // passed over, and the form's credentials authenticated the request).
    let basic = basic_credentials(&headers);
    let basic_sent = basic.is_some();
    if basic_sent && (form.client_id.is_some() || form.client_secret.is_some()) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "authenticate either with HTTP Basic or with client_id and client_secret in the form, not both",
        );
    }
    let credentials = match (form.client_id, form.client_secret) {
        (Some(id), Some(secret)) => Some((id, secret)),
        _ => basic.flatten(),
    };
    let Some((client_id, secret)) = credentials else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            if basic_sent {
                "the Authorization: Basic credentials do not read: base64 of client_id:client_secret expected"
            } else {
                "client_id and client_secret are required"
            },
        );
    };
    let Some(tenant) = endpoint.clients.authenticate(&client_id, &secret) else {
        // The client id (not a secret) ties failed attempts to a client; a client's own
        // text, so cut to what a client id can be and escaped by the log's format.
        let shown: String = client_id.chars().take(128).collect();
        tracing::info!(client_id = %shown.escape_debug(), "token request with unknown client or wrong secret");
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "unknown client or wrong secret",
        );
    };
    match endpoint.tokens.issue(tenant, TOKEN_TTL_SECS) {
        Ok(access_token) => {
            let mut response = Json(json!({
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": TOKEN_TTL_SECS,
            }))
            .into_response();
            // RFC 6749 section 5.1: neither kept by caches nor by HTTP/1.0 ones.
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
            response
                .headers_mut()
                .insert(header::PRAGMA, header::HeaderValue::from_static("no-cache"));
            response
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot sign a token");
            oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "cannot sign a token",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn form(body: String, version: Option<&str>) -> Request<Body> {
        let mut request = Request::post("/oauth2/token")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(v) = version {
            request = request.header("api-version", v);
        }
        request.body(Body::from(body)).expect("a request")
    }

    #[tokio::test]
    async fn token_answers_carry_the_api_version() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (clients, fresh) = Clients::load_or_create(dir.path()).expect("clients");
        let client = fresh.expect("the first start creates a client");
        let router = router(Arc::new(TokenEndpoint {
            tokens: Arc::new(LocalTokens::new(b"0123456789abcdef0123456789abcdef")),
            clients,
            body_timeout: std::time::Duration::from_secs(60),
        }));
        let good = format!(
            "grant_type=client_credentials&client_id={}&client_secret={}",
            client.client_id,
            client
                .client_secret
                .replace('+', "%2B")
                .replace('/', "%2F")
                .replace('=', "%3D")
        );
        let cases = [
            (form(good.clone(), None), StatusCode::OK),
            (form(good.clone(), Some("3.1")), StatusCode::OK),
            (
                form("grant_type=password".into(), None),
                StatusCode::BAD_REQUEST,
            ),
            (
                form(
                    "grant_type=client_credentials&client_id=x&client_secret=y".into(),
                    None,
                ),
                StatusCode::UNAUTHORIZED,
            ),
            // Another major: refused like on every other route, before the credentials.
            (form(good.clone(), Some("4")), StatusCode::BAD_REQUEST),
            // Basic and the form's credentials together: one method per request.
            (
                {
                    let mut r = form(
                        "grant_type=client_credentials&client_id=someone-else".into(),
                        None,
                    );
                    let basic =
                        STANDARD.encode(format!("{}:{}", client.client_id, client.client_secret));
                    r.headers_mut().insert(
                        header::AUTHORIZATION,
                        format!("Basic {basic}").parse().expect("a header"),
                    );
                    r
                },
                StatusCode::BAD_REQUEST,
            ),
            // Two Authorization headers, the client's Basic credentials first, or two
            // Content-Types, the form first: refused, not the first one used.
            (
                {
                    let mut r = form("grant_type=client_credentials".into(), None);
                    let basic =
                        STANDARD.encode(format!("{}:{}", client.client_id, client.client_secret));
                    for value in [format!("Basic {basic}"), "Basic Zm9vOmJhcg==".into()] {
                        r.headers_mut()
                            .append(header::AUTHORIZATION, value.parse().expect("a header"));
                    }
                    r
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                {
                    let mut r = form(good.clone(), None);
                    r.headers_mut().append(
                        header::CONTENT_TYPE,
                        "application/json".parse().expect("a header"),
                    );
                    r
                },
                StatusCode::BAD_REQUEST,
            ),
            // Two media types joined in one header: refused, not the first one used.
            (
                Request::post("/oauth2/token")
                    .header(
                        header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded; charset=utf-8, application/json",
                    )
                    .body(Body::from(good.clone()))
                    .expect("a request"),
                StatusCode::BAD_REQUEST,
            ),
            // Larger than a form may be: 413, as any body too large; one declared
            // larger is refused before a byte of it is read (this body never ends).
            (
                form(format!("{good}&pad={}", "x".repeat(MAX_FORM_BYTES)), None),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (
                Request::post("/oauth2/token")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .header(header::CONTENT_LENGTH, "2097152")
                    .body(Body::from_stream(futures_util::stream::pending::<
                        Result<axum::body::Bytes, std::io::Error>,
                    >()))
                    .expect("a request"),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            // A body whose framing breaks: 400, not "too large".
            (
                Request::post("/oauth2/token")
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(Body::from_stream(futures_util::stream::iter([
                        Ok(axum::body::Bytes::from_static(b"grant_type=")),
                        Err(std::io::Error::other("invalid chunk size")),
                    ])))
                    .expect("a request"),
                StatusCode::BAD_REQUEST,
            ),
            // Another method: a 405 problem naming the allowed one.
            (
                Request::get("/oauth2/token")
                    .body(Body::empty())
                    .expect("a request"),
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            // A media type in capitals is the same media type (an outside probe found
            // it refused).
            (
                Request::post("/oauth2/token")
                    .header(
                        header::CONTENT_TYPE,
                        "APPLICATION/X-WWW-FORM-URLENCODED; charset=UTF-8",
                    )
                    .body(Body::from(good.clone()))
                    .expect("a request"),
                StatusCode::OK,
            ),
            // A parameter given twice (RFC 6749 section 3.2).
            (
                form(format!("{good}&grant_type=client_credentials"), None),
                StatusCode::BAD_REQUEST,
            ),
        ];
        for (request, status) in cases {
            let response = router.clone().oneshot(request).await.expect("an answer");
            assert_eq!(response.status(), status);
            if status == StatusCode::OK {
                // RFC 6749 section 5.1.
                assert_eq!(response.headers()["cache-control"], "no-store");
                assert_eq!(response.headers()["pragma"], "no-cache");
            }
            assert_eq!(
                response.headers().get("api-version").map(|v| v.as_bytes()),
                Some(pricing_core::API_VERSION.as_bytes()),
                "{status}"
            );
        }
        // Basic credentials that do not decode are named as such (the answer said
        // client_id and client_secret were missing).
        let mut r = form("grant_type=client_credentials".into(), None);
        r.headers_mut().insert(
            header::AUTHORIZATION,
            "Basic !!!!".parse().expect("a header"),
        );
        let response = router.clone().oneshot(r).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("a body");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("Basic credentials do not read"), "{text}");
        // With the form's credentials too, it is two methods, however the header reads
        // (the form's authenticated the request).
        let mut r = form(
            format!(
                "grant_type=client_credentials&client_id={}&client_secret={}",
                client.client_id, client.client_secret
            ),
            None,
        );
        r.headers_mut().insert(
            header::AUTHORIZATION,
            "Basic !!!!".parse().expect("a header"),
        );
        let response = router.clone().oneshot(r).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}
