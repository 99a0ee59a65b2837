//! Per-tenant limits through the router on the embedded adapters (issue 9, item 5):
//! quotas on projects, instances and subscriptions (422 `quotaExceeded`, nothing
//! created), and the cap on a project-wide calculatePrices (422 `tooManyInstances`,
//! nothing enqueued).

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{TestApp, send_as};
use pricing_api::auth::LocalTokens;
use pricing_core::limits::Quotas;
use pricing_core::model::Message;
use pricing_core::ports::WorkQueue;
use pricing_core::webhooks::CallbackPolicy;
use pricing_embedded::EmbeddedStore;
use serde_json::{Value, json};

struct Harness {
    router: Router,
    store: EmbeddedStore,
    tokens: Arc<LocalTokens>,
}

fn harness(configure: impl FnOnce(TestApp) -> TestApp) -> Harness {
    let built = common::app_with(|app| configure(app.with_callback_policy(CallbackPolicy::LOCAL)));
    Harness {
        router: built.router,
        store: built.store,
        tokens: built.tokens,
    }
}

impl Harness {
    async fn call(
        &self,
        method: &str,
        path: &str,
        tenant: &str,
        body: Option<Value>,
    ) -> (StatusCode, axum::http::HeaderMap, Value) {
        let r = send_as(
            &self.router,
            &self.tokens,
            tenant,
            method,
            path,
            body.as_ref(),
        )
        .await;
        (r.status, r.headers, r.body)
    }

    async fn created(&self, path: &str, tenant: &str, body: Value) -> Value {
        let (status, _, body) = self.call("POST", path, tenant, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "POST {path}: {body}");
        body
    }

    /// Calculations waiting in the instance-work lane (taken off it).
    async fn recalculations(&self) -> usize {
        let mut n = 0;
        for received in self
            .store
            .receive(10_000, Duration::from_secs(60))
            .await
            .expect("receive")
        {
            if matches!(received.message, Message::Recalculate { .. }) {
                n += 1;
            }
            self.store.ack(&received.receipt).await.expect("ack");
        }
        n
    }
}

/// A 422 problem naming `code`.
fn assert_rule((status, headers, body): &(StatusCode, axum::http::HeaderMap, Value), code: &str) {
    assert_eq!(*status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["status"], 422);
    assert_eq!(body["errors"][0]["code"], code, "{body}");
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
}

fn quotas(projects: u64, instances: u64, subscriptions: u64) -> Quotas {
    Quotas {
        projects_per_tenant: projects,
        instances_per_project: instances,
        subscriptions_per_scope: subscriptions,
    }
}

#[tokio::test]
async fn a_tenant_past_its_project_quota_gets_422_and_nothing_is_created() {
    let h = harness(|app| app.with_quotas(quotas(2, 10, 20)));
    h.created("/projects", "acme", json!({"projectId": "a1"}))
        .await;
    h.created("/projects", "acme", json!({"projectId": "a2"}))
        .await;
    let refused = h
        .call(
            "POST",
            "/projects",
            "acme",
            Some(json!({"projectId": "a3"})),
        )
        .await;
    assert_rule(&refused, "quotaExceeded");
    assert!(
        refused.2["detail"].as_str().unwrap_or("").contains('2'),
        "the detail names the quota: {}",
        refused.2
    );
    let (status, _, _) = h.call("GET", "/projects/a3", "acme", None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the refused project is not stored"
    );
    let (_, _, listed) = h.call("GET", "/projects", "acme", None).await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2));
    // A taken id is still a conflict, not a quota problem.
    let (status, _, _) = h
        .call(
            "POST",
            "/projects",
            "acme",
            Some(json!({"projectId": "a1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Another tenant has a quota of its own.
    h.created("/projects", "other", json!({"projectId": "b1"}))
        .await;
}

#[tokio::test]
async fn a_project_past_its_instance_quota_gets_422_and_nothing_is_created() {
    let h = harness(|app| app.with_quotas(quotas(10, 2, 20)));
    h.created("/projects", "acme", json!({"projectId": "p"}))
        .await;
    h.created("/projects", "acme", json!({"projectId": "q"}))
        .await;
    h.created("/projects/p/instances", "acme", json!({"instanceId": "i1"}))
        .await;
    h.created("/projects/p/instances", "acme", json!({})).await;
    let refused = h
        .call(
            "POST",
            "/projects/p/instances",
            "acme",
            Some(json!({"instanceId": "i3"})),
        )
        .await;
    assert_rule(&refused, "quotaExceeded");
    let (status, _, _) = h
        .call("GET", "/projects/p/instances/i3", "acme", None)
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the refused instance is not stored"
    );
    let (_, _, listed) = h.call("GET", "/projects/p/instances", "acme", None).await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2));
    // The quota is per project.
    h.created("/projects/q/instances", "acme", json!({"instanceId": "i1"}))
        .await;
}

#[tokio::test]
async fn the_subscription_quota_is_configurable_and_answers_quota_exceeded() {
    let h = harness(|app| app.with_quotas(quotas(10, 10, 1)));
    h.created("/projects", "acme", json!({"projectId": "p"}))
        .await;
    h.created("/projects/p/instances", "acme", json!({"instanceId": "i"}))
        .await;
    let hook = json!({"callbackUrl": "http://127.0.0.1:9/hook"});
    h.created("/projects/p/subscriptions", "acme", hook.clone())
        .await;
    let refused = h
        .call(
            "POST",
            "/projects/p/subscriptions",
            "acme",
            Some(hook.clone()),
        )
        .await;
    assert_rule(&refused, "quotaExceeded");
    let (_, _, listed) = h
        .call("GET", "/projects/p/subscriptions", "acme", None)
        .await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
    // Each scope has its own: the instance's first one is fine, its second is not.
    h.created(
        "/projects/p/instances/i/subscriptions",
        "acme",
        hook.clone(),
    )
    .await;
    assert_rule(
        &h.call(
            "POST",
            "/projects/p/instances/i/subscriptions",
            "acme",
            Some(hook),
        )
        .await,
        "quotaExceeded",
    );
}

#[tokio::test]
async fn calculate_prices_over_a_whole_project_is_capped() {
    let h = harness(|mut app| {
        app.limits.max_calculation_fanout = 3;
        app
    });
    h.created("/projects", "acme", json!({"projectId": "p"}))
        .await;
    for i in 0..3 {
        h.created(
            "/projects/p/instances",
            "acme",
            json!({"instanceId": format!("i{i}")}),
        )
        .await;
    }
    let (status, _, body) = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            "acme",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["calculations"].as_array().map(Vec::len), Some(3));
    assert_eq!(h.recalculations().await, 3);

    h.created("/projects/p/instances", "acme", json!({"instanceId": "i3"}))
        .await;
    let refused = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            "acme",
            Some(json!({"metadata": {"run": 2}})),
        )
        .await;
    assert_rule(&refused, "tooManyInstances");
    assert_eq!(refused.2["errors"][0]["pointer"], "/instanceIds");
    assert_eq!(
        h.recalculations().await,
        0,
        "a refused request enqueues nothing"
    );

    // Named instances are bounded per request and still work.
    let (status, _, body) = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            "acme",
            Some(json!({"instanceIds": ["i0", "i3"]})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(h.recalculations().await, 2);

    // An empty selection names no instance: a 400, not a 202 that calculates nothing.
    let (status, _, body) = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            "acme",
            Some(json!({"instanceIds": []})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["errors"][0]["pointer"], "/instanceIds", "{body}");
    assert_eq!(h.recalculations().await, 0);
}

/// Bodies near the 5 MiB limit share the process's parsing budget (8 MiB of bodies held as
/// JSON values at once): several at once wait for each other and are all answered, each
/// as it would be alone (an outside probe held ~450 MB per 4.6 MB body of small members,
/// six at once ~0.9 GB). Over the budget a request waits; it is never refused for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_bodies_at_once_wait_for_each_other_and_are_all_answered() {
    let h = harness(|app| app);
    h.created("/projects", "acme", json!({"projectId": "p"}))
        .await;
    // 3.5 MiB of small members in calculatePrices' metadata: a 400 (metadata is at most
    // 8 KiB) after the whole body was parsed.
    let element = json!({"a": [1, 2, 3, {"b": "xxxxxxxx"}]});
    let count = 3_500_000 / element.to_string().len();
    let body = json!({"metadata": vec![element; count]});
    let calls = (0..5).map(|_| {
        h.call(
            "POST",
            "/projects/p/calculatePrices",
            "acme",
            Some(body.clone()),
        )
    });
    let answers = tokio::time::timeout(
        Duration::from_secs(120),
        futures_util::future::join_all(calls),
    )
    .await
    .expect("every request is answered");
    for (status, _, problem) in answers {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["errors"][0]["pointer"], "/metadata", "{problem}");
    }
    // The budget is whole again: a small request is answered at once.
    let (status, _, _) = tokio::time::timeout(
        Duration::from_secs(5),
        h.call("GET", "/projects/p", "acme", None),
    )
    .await
    .expect("answered");
    assert_eq!(status, StatusCode::OK);
}
