//! Deprecated item fields through the API (issue 11, item 4; INTERFACE.md, item fields):
//! `quantity` is accepted and ignored (capacities are still set up from legacy
//! quantities), and `dates` is an alias of `salesPeriod` in registrations, patches and
//! updates alike.

mod common;

use axum::http::StatusCode;
use common::{call, key, setup};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;
use serde_json::json;

async fn process(store: &EmbeddedStore) {
    let report = Processor::new()
        .process(store, store, &key(), Timestamp::now())
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
