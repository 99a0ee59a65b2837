//! What the API's test files on one in-memory store share: a router with project `p` and
//! instance `i` of tenant `acme`, and a call through it with a bearer token.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pricing_api::auth::{Authenticator, LocalTokens};
use pricing_api::{App, Stores, router};
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId, TenantId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;
use serde_json::{Value, json};
use tower::ServiceExt;

const SECRET: &[u8] = b"api-tests-secret-api-tests-secret-api-tests";

/// `method path` with `body` (JSON) as tenant `acme`: the status and the JSON answer
/// (null when the answer is not JSON).
pub async fn call(
    router: &Router,
    tokens: &LocalTokens,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let token = tokens.issue("acme", 600).expect("token");
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"));
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let response = router
        .clone()
        .oneshot(req.body(body).expect("request"))
        .await
        .expect("infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A router on an in-memory store with project `p` and instance `i` of tenant `acme`.
pub async fn setup() -> (EmbeddedStore, Router, Arc<LocalTokens>) {
    let store = EmbeddedStore::open_in_memory().expect("store");
    let key = StoredKey::generate("test-key".into(), Timestamp::now()).expect("key");
    let signer = Arc::new(Signer::from_keys(&[key]).expect("signer"));
    let tokens = Arc::new(LocalTokens::new(SECRET));
    let auth: Arc<dyn Authenticator> = tokens.clone();
    let app = App::new(
        Stores {
            store: store.clone(),
            queue: store.clone(),
        },
        signer,
        auth,
    );
    let router = router(Arc::new(app));
    let (status, body) = call(
        &router,
        &tokens,
        "POST",
        "/projects",
        Some(json!({"projectId": "p", "name": "p"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = call(
        &router,
        &tokens,
        "POST",
        "/projects/p/instances",
        Some(json!({"instanceId": "i"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (store, router, tokens)
}

/// The instance `i` of project `p` of tenant `acme`.
pub fn key() -> InstanceKey {
    InstanceKey::new(
        TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("p").expect("project id"),
        InstanceId::parse("i").expect("instance id"),
    )
}
