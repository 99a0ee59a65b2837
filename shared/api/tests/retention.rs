//! API reads after the standalone's pruning step (issue 12, item 3; docs/retention.md):
//! price history keeps what is within the horizon and each item's latest entry, the
//! latest prices are whole, and an events cursor naming a pruned event is a clear 400.

mod common;

use axum::http::StatusCode;
use common::{call, key, setup};
use pricing_core::model::{Event, PriceCalculation};
use pricing_core::ports::{EventStore, PriceStore};
use pricing_core::process::Processor;
use pricing_core::retention::Retention;
use pricing_core::time::Timestamp;
use serde_json::{Value, json};

const DAY: i64 = 86_400_000;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("a time")
}

/// A calculated price that changed (a history entry) or one kept as it was (none).
fn price(item: &str, value: f64, previous: Option<f64>, changed: bool) -> Value {
    let explanation = if changed {
        json!({"model": {"type": "fixed"}, "productMultiplier": 1.0, "raw": value})
    } else {
        json!({"kept": {"reason": "dynamicPricingOff", "source": "previousPrice"}})
    };
    json!({
        "itemId": item,
        "price": value,
        "previousPrice": previous,
        "changed": changed,
        "status": if changed { "calculated" } else { "kept" },
        "explanation": explanation,
    })
}

#[tokio::test]
async fn reads_after_pruning_are_as_documented() {
    let (store, router, tokens) = setup().await;
    let period = json!({"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"});
    let (status, body) = call(
        &router,
        &tokens,
        "POST",
        "/projects/p/instances/i/entries",
        Some(json!({"entries": [
            {"type": "productRegistration", "data": {"productId": "ga", "capacity": 10}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
                "salesPeriod": period, "priceSettings": {"min": 10, "max": 90, "default": 40}}},
            {"type": "itemRegistration", "data": {"itemId": "d", "productId": "ga",
                "salesPeriod": period, "priceSettings": {"min": 10, "max": 90, "default": 40}}},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    Processor::new()
        .process(&store, &store, &key(), Timestamp::now())
        .await
        .expect("processing");
    // Calculation n on day n: a changes every time, d only in the first.
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z")
        .expect("time")
        .millis();
    for n in 1..=3u64 {
        let d = if n == 1 {
            price("d", 7.0, None, true)
        } else {
            price("d", 7.0, Some(7.0), false)
        };
        let c: PriceCalculation = serde_json::from_value(json!({
            "calculationId": format!("calc-{n}"),
            "trigger": "schedule",
            "calculatedAt": at(t0 + n as i64 * DAY),
            "sequence": n,
            "prices": [price("a", 10.0 + n as f64, Some(9.0 + n as f64), true), d],
        }))
        .expect("a calculation");
        assert!(
            store
                .save_calculation(&key(), &c, &[])
                .await
                .expect("saved")
        );
    }
    let events: Vec<Event> = (1..=2)
        .map(|n| {
            serde_json::from_value(json!({
                "id": format!("evt-{n}"),
                "type": "entries.rejected",
                "projectId": "p",
                "instanceId": "i",
                "createdAt": at(t0 + n * DAY),
                "data": {"errors": []},
            }))
            .expect("an event")
        })
        .collect();
    store.append_events(&key(), &events).await.expect("events");
    store
        .mark_dispatched(&key(), "evt-1")
        .await
        .expect("dispatched");

    // A year on, with the default policy.
    let report = store
        .prune(&Retention::default(), at(t0 + 400 * DAY), 1_000)
        .await
        .expect("pruned");
    assert_eq!((report.history, report.events), (2, 1), "{report:?}");

    let history = |item: &'static str| {
        let (router, tokens) = (&router, &tokens);
        async move {
            let path = format!("/projects/p/instances/i/items/{item}/priceHistory");
            let (status, body) = call(router, tokens, "GET", &path, None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|e| e["sequence"].as_u64().expect("sequence"))
                .collect::<Vec<_>>()
        }
    };
    // The latest calculation's entry stays; d's only entry explains its current price.
    assert_eq!(history("a").await, vec![3]);
    assert_eq!(history("d").await, vec![1]);
    let (status, body) = call(
        &router,
        &tokens,
        "GET",
        "/projects/p/instancePrices?instanceId=i",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["calculationId"], "calc-3", "{body}");
    assert_eq!(
        body["items"][0]["prices"],
        json!([{"itemId": "a", "price": 13.0}, {"itemId": "d", "price": 7.0}]),
        "{body}"
    );
    // evt-1 (dispatched) is gone, evt-2 (not dispatched yet) stays.
    let (status, body) = call(
        &router,
        &tokens,
        "GET",
        "/projects/p/instances/i/events",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ids: Vec<&str> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["evt-2"], "{body}");
    let (status, body) = call(
        &router,
        &tokens,
        "GET",
        "/projects/p/instances/i/events?cursor=evt-1",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not an event of this instance")),
        "{body}"
    );
    // A cursor naming a kept event pages on.
    let (status, body) = call(
        &router,
        &tokens,
        "GET",
        "/projects/p/instances/i/events?cursor=evt-2",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A calculation is kept 90 days from when the next one replaced it, not from its own time
/// (found by an outside review: the standalone counted from its own time, so one that
/// stayed the latest for a quarter went at the first pruning after it was replaced).
#[tokio::test]
async fn a_calculation_is_kept_from_when_it_was_replaced() {
    let (store, _router, _tokens) = setup().await;
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z")
        .expect("time")
        .millis();
    // Day 0 and day 100; neither changed a price, so no history row holds either.
    for (n, day) in [(1u64, 0i64), (2, 100)] {
        let c: PriceCalculation = serde_json::from_value(json!({
            "calculationId": format!("calc-{n}"),
            "trigger": "schedule",
            "calculatedAt": at(t0 + day * DAY),
            "sequence": n,
            "prices": [price("a", 10.0, Some(10.0), false)],
        }))
        .expect("a calculation");
        assert!(
            store
                .save_calculation(&key(), &c, &[])
                .await
                .expect("saved")
        );
    }
    // Day 101: replaced a day ago, well within 90 days.
    let report = store
        .prune(&Retention::default(), at(t0 + 101 * DAY), 1_000)
        .await
        .expect("pruned");
    assert_eq!(report.calculations, 0, "{report:?}");
    assert!(store.has_calculation(&key(), "calc-1").await.expect("read"));
    // Day 191: replaced 91 days ago.
    let report = store
        .prune(&Retention::default(), at(t0 + 191 * DAY), 1_000)
        .await
        .expect("pruned");
    assert_eq!(report.calculations, 1, "{report:?}");
    assert!(!store.has_calculation(&key(), "calc-1").await.expect("read"));
    assert!(
        store.has_calculation(&key(), "calc-2").await.expect("read"),
        "the latest stays"
    );
}
