//! Deprecated item fields through the API (issue 11, item 4; INTERFACE.md, item fields):
//! `quantity` is accepted and ignored (capacities are still set up from legacy
//! quantities), and `dates` is an alias of `salesPeriod` in registrations, patches and
//! updates alike.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pricing_api::auth::{Authenticator, LocalTokens};
use pricing_api::{App, Stores, router};
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId, TenantId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;
use serde_json::{Value, json};
use tower::ServiceExt;

const SECRET: &[u8] = b"legacy-fields-secret-legacy-fields-secret";

async fn call(
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
async fn setup() -> (EmbeddedStore, Router, Arc<LocalTokens>) {
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

async fn process(store: &EmbeddedStore) {
    let key = InstanceKey::new(
        TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("p").expect("project id"),
        InstanceId::parse("i").expect("instance id"),
    );
    let report = Processor::new()
        .process(store, store, &key, Timestamp::now())
        .await
        .expect("processing");
    assert_eq!(report.rejected, 0, "{report:?}");
}

#[tokio::test]
async fn deprecated_quantity_is_ignored_and_dates_takes_effect() {
    let (store, router, tokens) = setup().await;
    let entries = "/projects/p/instances/i/entries";
    let period = |a: &str, b: &str| json!({"start": a, "end": b});
    let (status, body) = call(&router, &tokens, "POST", entries, Some(json!({"entries": [
        {"type": "productRegistration", "data": {"productId": "ga"}},
        // A legacy registration: quantity among the properties (was: 400 removed).
        {"type": "itemRegistration", "data": {
            "itemId": "a", "productId": "ga",
            "salesPeriod": period("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
            "priceSettings": {"min": 10, "max": 90, "default": 40},
            "properties": {"quantity": 40}}},
        {"type": "itemRegistration", "data": {
            "itemId": "b", "productId": "ga",
            "dates": period("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
            "priceSettings": {"min": 10, "max": 90, "default": 40}}},
        {"type": "itemProperties", "data": {"itemId": "a", "patch": [
            {"op": "add", "path": "/quantity", "value": 5},
            {"op": "replace", "path": "/dates", "value": period("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")}
        ]}},
        {"type": "itemProperties", "data": {"itemId": "b", "update": {
            "quantity": 7,
            "dates": period("2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z")
        }}}
    ]}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["accepted"], 5, "{body}");
    process(&store).await;
    for (item, start) in [("a", "2026-03-01T00:00:00Z"), ("b", "2026-05-01T00:00:00Z")] {
        let (status, body) = call(
            &router,
            &tokens,
            "GET",
            &format!("/projects/p/instances/i/items/{item}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let props = &body["properties"];
        assert_eq!(props["salesPeriod"]["start"], start, "{body}");
        assert!(
            props.get("quantity").is_none() && props.get("dates").is_none(),
            "{body}"
        );
    }
    // The product's capacity comes from the legacy quantity (40), not from the patch.
    let (_, body) = call(
        &router,
        &tokens,
        "GET",
        "/projects/p/instances/i/items/a",
        None,
    )
    .await;
    assert_eq!(body["available"], 40, "{body}");
}

#[tokio::test]
async fn instance_actions_become_the_items_dynamic_pricing_periods() {
    let (store, router, tokens) = setup().await;
    let period = |a: &str, b: &str| json!({"start": a, "end": b});
    let action = |a: &str, d: &str| json!({"action": a, "date": d});
    let (status, body) = call(
        &router,
        &tokens,
        "POST",
        "/projects/p/instances/i/entries",
        Some(json!({"entries": [
            {"type": "productRegistration", "data": {"productId": "ga", "capacity": 10}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
                "salesPeriod": period("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
                "priceSettings": {"min": 10, "max": 90, "default": 40}}},
            {"type": "itemRegistration", "data": {"itemId": "own", "productId": "ga",
                "salesPeriod": period("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
                "dynamicPricingPeriod": period("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
                "priceSettings": {"min": 10, "max": 90, "default": 40}}},
            // Two windows: March, and from October on (given out of order).
            {"type": "instanceActions", "data": {"actions": [
                action("enable", "2026-10-01T00:00:00Z"),
                action("enable", "2026-03-01T00:00:00Z"),
                action("disable", "2026-04-01T00:00:00Z"),
            ]}},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    process(&store).await;
    let item = |id: &'static str| {
        let (router, tokens) = (&router, &tokens);
        async move {
            let path = format!("/projects/p/instances/i/items/{id}");
            let (status, body) = call(router, tokens, "GET", &path, None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["dynamicPricingPeriods"].clone()
        }
    };
    assert_eq!(
        item("a").await,
        json!([
            period("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"),
            period("2026-10-01T00:00:00Z", "2027-01-01T00:00:00Z"),
        ]),
        "every window, each within the sales period"
    );
    assert_eq!(
        item("own").await,
        json!([period("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z")]),
        "an item's own dynamicPricingPeriod wins"
    );
}
