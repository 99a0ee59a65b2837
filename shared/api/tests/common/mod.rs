//! What the API's test files share: an app on an in-memory store with its router and
//! token issuer, a request through the router, and (for the files that want them) project
//! `p` with instance `i` of tenant `acme`. Each file uses some of it.
#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
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

/// The app the tests build: the embedded store as every port.
pub type TestApp = App<Stores<EmbeddedStore, EmbeddedStore>>;

/// An app on a new in-memory store, and what the tests reach it with.
pub struct Built {
    pub store: EmbeddedStore,
    pub router: Router,
    /// The issuer of the app's bearer tokens.
    pub tokens: Arc<LocalTokens>,
    /// The app's signing key (entries and webhooks are signed with it).
    pub signer: Arc<Signer>,
}

/// An app on a new in-memory store, as `configure` sets it up.
pub fn app_with(configure: impl FnOnce(TestApp) -> TestApp) -> Built {
    let store = EmbeddedStore::open_in_memory().expect("store");
    let key = StoredKey::generate("test-key".into(), Timestamp::now()).expect("key");
    let signer = Arc::new(Signer::from_keys(&[key]).expect("signer"));
    let tokens = Arc::new(LocalTokens::new(SECRET));
    let auth: Arc<dyn Authenticator> = tokens.clone();
    let app = configure(App::new(
        Stores {
            store: store.clone(),
            queue: store.clone(),
        },
        signer.clone(),
        auth,
    ));
    Built {
        store,
        router: router(Arc::new(app)),
        tokens,
        signer,
    }
}

/// An app on a new in-memory store, as it comes.
pub fn app() -> Built {
    app_with(|app| app)
}

/// An answer: its status, headers and JSON body (null when the body is not JSON).
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

/// `method path` with `body` as JSON and `token` as the bearer token, when given.
pub async fn send(
    router: &Router,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let (status, headers, bytes) = respond(router, req.body(body).expect("request")).await;
    Reply {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// `request` through `router`: the answer's status, headers and body bytes.
pub async fn respond(
    router: &Router,
    request: Request<Body>,
) -> (StatusCode, HeaderMap, axum::body::Bytes) {
    let response = router.clone().oneshot(request).await.expect("infallible");
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, headers, bytes)
}

/// `method path` with `body` as tenant `tenant`.
pub async fn send_as(
    router: &Router,
    tokens: &LocalTokens,
    tenant: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Reply {
    let token = tokens.issue(tenant, 600).expect("token");
    send(router, Some(&token), method, path, body).await
}

/// `method path` with `body` as tenant `acme`: the status and the JSON answer.
pub async fn call(
    router: &Router,
    tokens: &LocalTokens,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let r = send_as(router, tokens, "acme", method, path, body.as_ref()).await;
    (r.status, r.body)
}

/// An app on an in-memory store with project `p` and instance `i` of tenant `acme`.
pub async fn setup() -> (EmbeddedStore, Router, Arc<LocalTokens>) {
    let Built {
        store,
        router,
        tokens,
        ..
    } = app();
    let project = json!({"projectId": "p", "name": "p"});
    let (status, body) = call(&router, &tokens, "POST", "/projects", Some(project)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let instance = json!({"instanceId": "i"});
    let path = "/projects/p/instances";
    let (status, body) = call(&router, &tokens, "POST", path, Some(instance)).await;
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
