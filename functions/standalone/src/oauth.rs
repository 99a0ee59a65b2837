//! `POST /oauth2/token`: the client-credentials grant of the standalone service (RFC 6749
//! section 4.4). Credentials come in the form or as HTTP Basic.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Json, Router};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use pricing_api::auth::LocalTokens;
use serde::Deserialize;
use serde_json::json;

use crate::datadir::Clients;

/// Lifetime of tokens from this endpoint.
pub const TOKEN_TTL_SECS: i64 = 3_600;

pub struct TokenEndpoint {
    pub tokens: Arc<LocalTokens>,
    pub clients: Clients,
}

#[derive(Debug, Deserialize)]
pub struct TokenForm {
    grant_type: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
}

pub fn router(endpoint: Arc<TokenEndpoint>) -> Router {
    Router::new()
        .route("/oauth2/token", post(token))
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

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

async fn token(
    State(endpoint): State<Arc<TokenEndpoint>>,
    headers: HeaderMap,
    form: Result<Form<TokenForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "send application/x-www-form-urlencoded with grant_type=client_credentials",
        );
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
    let credentials = match (form.client_id, form.client_secret) {
        (Some(id), Some(secret)) => Some((id, secret)),
        _ => basic_credentials(&headers),
    };
    let Some((client_id, secret)) = credentials else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client_id and client_secret are required",
        );
    };
    let Some(tenant) = endpoint.clients.authenticate(&client_id, &secret) else {
        tracing::info!("token request with unknown client or wrong secret");
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
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
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
