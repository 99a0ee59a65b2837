//! Per-tenant limits through the real management-api handler (lambda_http over the shared
//! router, wired from the environment as on AWS) on DynamoDB provisioned from
//! template.yaml on the emulator (issue 9, item 5): one tenant flooding gets 429s while
//! another tenant's requests go on; quotas set through the environment answer 422
//! `quotaExceeded` and create nothing.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use axum::Router;
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Context, LambdaEvent, Service};
use pricing_aws::Config;
use pricing_aws::config::vars;
use pricing_lambda::wiring::Aws;
use serde_json::{Value, json};

/// An API Gateway v2 event for `method path` with `body`, authorized for `tenant`.
fn http_event(method: &str, path: &str, body: Option<Value>, tenant: &str) -> String {
    let file = format!(
        "{}/../../infra/events/apigw-v2-submit-entries.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut e: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    e["routeKey"] = json!(format!("{method} /{{proxy+}}"));
    e["requestContext"]["routeKey"] = e["routeKey"].clone();
    e["rawPath"] = json!(path);
    e["rawQueryString"] = json!("");
    e["requestContext"]["http"]["method"] = json!(method);
    e["requestContext"]["http"]["path"] = json!(path);
    e["requestContext"]["authorizer"]["jwt"]["claims"]["tenant"] = json!(tenant);
    e["pathParameters"] = json!({});
    match body {
        Some(b) => e["body"] = json!(b.to_string()),
        None => {
            e["body"] = Value::Null;
            e["headers"].as_object_mut().unwrap().remove("content-type");
        }
    }
    e.to_string()
}

struct Answer {
    status: u16,
    headers: Value,
    body: Value,
}

async fn invoke(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    tenant: &str,
) -> Answer {
    let request: LambdaRequest =
        serde_json::from_str(&http_event(method, path, body, tenant)).unwrap();
    let response = Adapter::from(router.clone())
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .expect("the adapter answers");
    let v = serde_json::to_value(&response).unwrap();
    Answer {
        status: v["statusCode"].as_u64().unwrap() as u16,
        headers: v["headers"].clone(),
        body: v["body"]
            .as_str()
            .map(|b| serde_json::from_str(b).unwrap_or(Value::Null))
            .unwrap_or(Value::Null),
    }
}

/// The management API of a fresh stack whose environment also holds `extra`.
async fn management_api(name: &str, extra: &[(&str, &str)]) -> Router {
    let mut env: HashMap<String, String> = pricing_emulator::provision(name);
    for (k, v) in extra {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("bootstrap the keys");
    aws.management_router()
        .await
        .expect("management-api cold start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_is_limited_and_another_tenant_is_not() {
    // 5 requests per tenant per hour: a flood of 30 crosses at most one window boundary.
    const LIMIT: usize = 5;
    const FLOOD: usize = 30;
    let api = management_api(
        "tenant-rate",
        &[
            (vars::TENANT_RATE_LIMIT, "5"),
            (vars::TENANT_RATE_WINDOW_SECONDS, "3600"),
        ],
    )
    .await;

    let mut flood_ok = 0;
    let mut flood_limited = 0;
    let mut calm = Vec::new();
    for i in 0..FLOOD {
        let a = invoke(&api, "GET", "/projects", None, "flood").await;
        match a.status {
            200 => flood_ok += 1,
            429 => {
                flood_limited += 1;
                assert_eq!(a.headers["content-type"], "application/problem+json");
                assert_eq!(a.body["status"], 429, "{}", a.body);
                let retry: u64 = a.headers["retry-after"].as_str().unwrap().parse().unwrap();
                assert!((1..=3600).contains(&retry), "Retry-After {retry}");
            }
            other => panic!("the flooding tenant got {other}: {}", a.body),
        }
        // The other tenant's requests in between all succeed.
        if i % 10 == 9 {
            calm.push(invoke(&api, "GET", "/projects", None, "calm").await.status);
        }
    }
    let created = invoke(
        &api,
        "POST",
        "/projects",
        Some(json!({"projectId": "calm-p"})),
        "calm",
    )
    .await;
    calm.push(created.status);
    eprintln!("flood: {flood_ok} admitted, {flood_limited} limited of {FLOOD}; calm: {calm:?}");
    assert!(
        flood_ok <= 2 * LIMIT,
        "the flooding tenant got at most its limit per window through: {flood_ok}"
    );
    assert!(flood_limited >= FLOOD - 2 * LIMIT, "{flood_limited}");
    assert_eq!(
        calm,
        vec![200, 200, 200, 201],
        "the other tenant is not affected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_from_the_environment_refuse_creates_with_422() {
    let api = management_api(
        "tenant-quotas",
        &[
            (vars::MAX_PROJECTS_PER_TENANT, "2"),
            (vars::MAX_INSTANCES_PER_PROJECT, "1"),
        ],
    )
    .await;
    for id in ["q1", "q2"] {
        let a = invoke(
            &api,
            "POST",
            "/projects",
            Some(json!({"projectId": id})),
            "acme",
        )
        .await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    let refused = invoke(
        &api,
        "POST",
        "/projects",
        Some(json!({"projectId": "q3"})),
        "acme",
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    assert_eq!(refused.body["errors"][0]["code"], "quotaExceeded");
    assert_eq!(
        invoke(&api, "GET", "/projects/q3", None, "acme")
            .await
            .status,
        404
    );
    let listed = invoke(&api, "GET", "/projects", None, "acme").await;
    assert_eq!(listed.body["items"].as_array().map(Vec::len), Some(2));

    let a = invoke(
        &api,
        "POST",
        "/projects/q1/instances",
        Some(json!({"instanceId": "i1"})),
        "acme",
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let refused = invoke(
        &api,
        "POST",
        "/projects/q1/instances",
        Some(json!({"instanceId": "i2"})),
        "acme",
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.body["errors"][0]["code"], "quotaExceeded");
    assert_eq!(
        invoke(&api, "GET", "/projects/q1/instances/i2", None, "acme")
            .await
            .status,
        404
    );
    // Per project: the tenant's other project takes one.
    let a = invoke(
        &api,
        "POST",
        "/projects/q2/instances",
        Some(json!({"instanceId": "i1"})),
        "acme",
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
}
