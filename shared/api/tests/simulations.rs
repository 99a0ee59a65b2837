//! POST /simulations (issue 14, the console's simulation page): a market scenario in the
//! format of `standalone simulate market --scenario` answered with the report of its
//! `--json`; every refusal a problem naming the field; the API's caps.

mod common;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use pricing_api::auth::LocalTokens;
use pricing_simulate::caps;
use pricing_simulate::report::Report;
use pricing_simulate::scenario::Scenario;
use serde_json::{Value, json};

fn app() -> (Router, Arc<LocalTokens>) {
    let built = common::app();
    (built.router, built.tokens)
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: Value,
}

async fn post(router: &Router, token: Option<&str>, path: &str, body: Option<&Value>) -> Reply {
    let r = common::send(router, token, "POST", path, body).await;
    let content_type = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Reply {
        status: r.status,
        content_type,
        body: r.body,
    }
}

/// A small market: 10 days, hourly prices, 50 seats, 40 runs.
fn small() -> Value {
    json!({
        "name": "small",
        "days": 10,
        "slotsPerDay": 24,
        "capacity": 50,
        "expectedSales": 0.9,
        "items": [{
            "itemId": "ga",
            "priceSettings": {"min": 20, "max": 100, "default": 50},
            "arrivals": 150,
            "shape": [[0, 1], [1, 2]],
            "willingnessToPay": {"type": "exponential", "mean": 40}
        }],
        "runs": 40,
        "seed": 7
    })
}

#[tokio::test]
async fn a_scenario_is_answered_with_the_report_of_simulate_market_json() {
    let (router, tokens) = app();
    let token = tokens.issue("acme", 600).expect("token");
    let r = post(&router, Some(&token), "/simulations", Some(&small())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.content_type.starts_with("application/json"));
    // The same figures as `standalone simulate market --scenario FILE --json` (the same
    // code; the result does not depend on the threads).
    let scenario = Scenario::from_json(&small()).expect("scenario");
    let models = caps::models(&[]).expect("models");
    let expected = Report::of(&scenario, &models, 2, &pricing_simulate::NoProgress)
        .expect("report")
        .to_json()
        .expect("json");
    assert_eq!(
        r.body,
        serde_json::from_str::<Value>(&expected).expect("json")
    );
    let labels: Vec<&str> = r.body["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, caps::DEFAULT_MODELS);
    assert_eq!(r.body["scenario"], "small");
    assert_eq!(r.body["runs"], 40);
    let optimal = r.body["optimal"]["revenue"].as_f64().expect("optimal");
    assert!(optimal > 0.0);
    assert!(r.body["fluidBound"].as_f64().expect("fluid") >= optimal);
    assert!(r.body["bestFixed"]["revenue"].as_f64().expect("fixed") <= optimal);
    for m in r.body["models"].as_array().expect("models") {
        assert!(m["revenue"]["ci95"].as_f64().expect("ci") > 0.0, "{m}");
        assert!(m["sold"]["mean"].as_f64().expect("sold") <= 50.0, "{m}");
        let pct = m["revenue"]["mean"].as_f64().expect("mean") * 100.0 / optimal;
        let given = m["percentOfOptimal"].as_f64().expect("pct");
        assert!((pct - given).abs() < 0.05, "{m}");
    }

    // Models by name, in the order given.
    let r = post(
        &router,
        Some(&token),
        "/simulations?models=revenue,fixed",
        Some(&small()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["models"][0]["label"], "revenue");
    assert_eq!(r.body["models"][1]["label"], "fixed");
}

#[tokio::test]
async fn a_simulation_needs_a_token() {
    let (router, _) = app();
    let r = post(&router, None, "/simulations", Some(&small())).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

/// Posts `small()` edited by `edit` (with `query`), expecting a problem of `status` whose
/// first error is at `pointer` with a message containing `says`.
async fn refused(
    query: &str,
    edit: impl FnOnce(&mut Value),
    status: StatusCode,
    pointer: &str,
    says: &str,
) -> Value {
    let (router, tokens) = app();
    let token = tokens.issue("acme", 600).expect("token");
    let mut body = small();
    edit(&mut body);
    let r = post(
        &router,
        Some(&token),
        &format!("/simulations{query}"),
        Some(&body),
    )
    .await;
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.content_type, "application/problem+json");
    if !pointer.is_empty() || r.body.get("errors").is_some() {
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{}", r.body);
        let message = r.body["errors"][0]["message"].as_str().expect("message");
        assert!(message.contains(says), "{message}");
    } else {
        let detail = r.body["detail"].as_str().expect("detail");
        assert!(detail.contains(says), "{detail}");
    }
    r.body
}

#[tokio::test]
async fn an_invalid_field_is_a_400_naming_it() {
    let bad = StatusCode::BAD_REQUEST;
    let body = refused(
        "",
        |v| v["items"][0]["willingnessToPay"]["mean"] = json!(0),
        bad,
        "/items/0/willingnessToPay/mean",
        "must be > 0",
    )
    .await;
    assert_eq!(body["errors"][0]["code"], "range");
    let body = refused(
        "",
        |v| v["items"][0]["colour"] = json!("red"),
        bad,
        "/items/0/colour",
        "unknown field",
    )
    .await;
    assert_eq!(body["errors"][0]["code"], "unknownField");
    refused(
        "",
        |v| {
            v.as_object_mut().expect("object").remove("capacity");
        },
        bad,
        "/capacity",
        "is required",
    )
    .await;
    refused(
        "",
        |v| v["items"][0]["priceSettings"]["default"] = json!(120),
        bad,
        "/items/0/priceSettings/default",
        "within [min, max]",
    )
    .await;
    refused(
        "",
        |v| v["items"][0]["shape"] = json!([[0.2, 1], [1, 1]]),
        bad,
        "/items/0/shape",
        "share 0",
    )
    .await;
    refused("", |v| *v = json!([1]), bad, "", "must be a JSON object").await;
    refused(
        "?models=pace,surge",
        |_| {},
        bad,
        "",
        "unknown model `surge`",
    )
    .await;
    refused("?models=pace,pace", |_| {}, bad, "", "listed twice").await;
    refused("?models=", |_| {}, bad, "", "names no model").await;
    refused("?models=%20,", |_| {}, bad, "", "names no model").await;
}

#[tokio::test]
async fn a_simulation_over_the_caps_is_refused_naming_the_cap() {
    let bad = StatusCode::BAD_REQUEST;
    refused(
        "",
        |v| v["runs"] = json!(1001),
        bad,
        "/runs",
        "from 1 to 1000",
    )
    .await;
    refused(
        "",
        |v| v["pastInstances"] = json!(6),
        bad,
        "/pastInstances",
        "from 0 to 5",
    )
    .await;
    refused(
        "",
        |v| v["capacity"] = json!(1001),
        bad,
        "/capacity",
        "from 1 to 1000",
    )
    .await;
    refused(
        "",
        |v| v["days"] = json!(366),
        bad,
        "/days",
        "from 0.01 to 365",
    )
    .await;
    refused(
        "",
        |v| v["items"][0]["arrivals"] = json!(5_001),
        bad,
        "/items/0/arrivals",
        "from 0 to 5000",
    )
    .await;
    refused(
        "",
        |v| {
            v["name"] = json!("n".repeat(129));
        },
        bad,
        "/name",
        "at most 128",
    )
    .await;
    // Within every field's cap, but 1000 runs x 6 instances x (5 models x (2880 + 50) + 15).
    let body = refused(
        "",
        |v| {
            v["runs"] = json!(1000);
            v["pastInstances"] = json!(5);
            v["days"] = json!(120);
        },
        StatusCode::UNPROCESSABLE_ENTITY,
        "/runs",
        "over the cap of 300000",
    )
    .await;
    assert_eq!(body["errors"][0]["code"], "tooMuchWork");
    // The work is the product: 1000 runs of one model fit, of two do not.
    refused(
        "?models=pace,fixed",
        |v| v["runs"] = json!(1000),
        StatusCode::UNPROCESSABLE_ENTITY,
        "/runs",
        "1000 x 1 x (2 x (240 x 1 + 50) + 150 / 10) = 595000",
    )
    .await;
    refused(
        "",
        |v| v["slotsPerDay"] = json!(25),
        bad,
        "/slotsPerDay",
        "from 1 to 24",
    )
    .await;
}
