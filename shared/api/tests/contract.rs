//! The service against its OpenAPI document where Schemathesis found them apart (issue 11,
//! item 2): management requests refuse null where the document says string or boolean,
//! an undocumented method on a removed endpoint is a 405 (not its 410), an instance's name
//! is bounded on update as on create, and a reported status may be written 500.0.

mod common;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use common::{Reply, send_as};
use pricing_api::auth::LocalTokens;
use serde_json::{Value, json};

struct Harness {
    router: Router,
    tokens: Arc<LocalTokens>,
}

fn harness() -> Harness {
    let built = common::app();
    Harness {
        router: built.router,
        tokens: built.tokens,
    }
}

impl Harness {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        send_as(
            &self.router,
            &self.tokens,
            "acme",
            method,
            path,
            body.as_ref(),
        )
        .await
    }

    async fn ok(&self, method: &str, path: &str, body: Value) -> Value {
        let r = self.call(method, path, Some(body)).await;
        assert!(r.status.is_success(), "{method} {path}: {:?}", r.body);
        r.body
    }
}

/// The located errors of a 400: (pointer, code).
fn located(r: &Reply) -> Vec<(String, String)> {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    r.body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| {
            (
                e["pointer"].as_str().unwrap_or_default().to_owned(),
                e["code"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn type_error(pointer: &str) -> Vec<(String, String)> {
    vec![(pointer.to_owned(), "type".to_owned())]
}

#[tokio::test]
async fn management_requests_refuse_null_where_the_document_does() {
    let h = harness();
    let r = h
        .call("POST", "/projects", Some(json!({"projectId": null})))
        .await;
    assert_eq!(located(&r), type_error("/projectId"));
    let r = h
        .call("POST", "/projects", Some(json!({"name": null})))
        .await;
    assert_eq!(located(&r), type_error("/name"));
    h.ok("POST", "/projects", json!({"projectId": "p"})).await;

    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some(json!({"instanceId": "i", "active": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/active"));
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some(json!({"instanceId": "i", "meta": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/meta"));
    // timeZone and deactivationDate may be null: none.
    let created = h
        .ok(
            "POST",
            "/projects/p/instances",
            json!({"instanceId": "i", "timeZone": null, "deactivationDate": null}),
        )
        .await;
    assert_eq!(created["timeZone"], Value::Null);

    for field in ["active", "name"] {
        let r = h
            .call("PUT", "/projects/p/instances/i", Some(json!({field: null})))
            .await;
        assert_eq!(located(&r), type_error(&format!("/{field}")));
    }
    let set = h
        .ok(
            "PUT",
            "/projects/p/instances/i",
            json!({"timeZone": "Europe/Berlin"}),
        )
        .await;
    assert_eq!(set["timeZone"], "Europe/Berlin");
    let cleared = h
        .ok("PUT", "/projects/p/instances/i", json!({"timeZone": null}))
        .await;
    assert_eq!(cleared["timeZone"], Value::Null, "null still removes it");

    let hook = |extra: Value| {
        let mut body = json!({"callbackUrl": "https://example.com/hook"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };
    for field in ["description", "events", "callbackUrl"] {
        for path in [
            "/projects/p/subscriptions",
            "/projects/p/instances/i/subscriptions",
        ] {
            let r = h.call("POST", path, Some(hook(json!({field: null})))).await;
            assert_eq!(located(&r), type_error(&format!("/{field}")), "{path}");
        }
    }
    h.ok("POST", "/projects/p/subscriptions", hook(json!({})))
        .await;

    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some(json!({"instanceIds": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/instanceIds"));
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some(json!({"metadata": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/metadata"));

    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/priceMatches",
            Some(json!({"itemId": "a", "sourceItemId": "b", "ratio": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/ratio"));

    let r = h
        .call(
            "POST",
            "/webhooks/errors",
            Some(json!({"webhookId": "msg_x", "message": "m", "status": null})),
        )
        .await;
    assert_eq!(located(&r), type_error("/status"));
}

#[tokio::test]
async fn an_instance_name_is_bounded_on_update_as_on_create() {
    let h = harness();
    h.ok("POST", "/projects", json!({"projectId": "p"})).await;
    h.ok("POST", "/projects/p/instances", json!({"instanceId": "i"}))
        .await;
    let long = "n".repeat(257);
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some(json!({"name": long})),
        )
        .await;
    assert_eq!(located(&r), vec![("/name".to_owned(), "range".to_owned())]);
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some(json!({"instanceId": "j", "name": long})),
        )
        .await;
    assert_eq!(located(&r), vec![("/name".to_owned(), "range".to_owned())]);
    let fits = "n".repeat(256);
    let updated = h
        .ok("PUT", "/projects/p/instances/i", json!({"name": fits}))
        .await;
    assert_eq!(updated["name"], fits);
    // Characters, as the schema's maxLength counts them, not bytes: 256 two-byte ones fit.
    let accented = "é".repeat(256);
    let updated = h
        .ok("PUT", "/projects/p/instances/i", json!({"name": accented}))
        .await;
    assert_eq!(updated["name"], accented);
    let project = h
        .ok(
            "POST",
            "/projects",
            json!({"projectId": "q", "name": accented}),
        )
        .await;
    assert_eq!(project["name"], accented);
}

#[tokio::test]
async fn a_removed_endpoint_answers_410_to_its_methods_and_405_to_others() {
    let h = harness();
    let cases = [
        (
            "/projects/p/publicKeys",
            &["GET", "POST", "HEAD"][..],
            "GET,HEAD,POST",
        ),
        (
            "/projects/p/instances/i/items",
            &["POST"][..],
            "GET,HEAD,POST",
        ),
        ("/projects/p/subprojects", &["POST"][..], "POST"),
    ];
    for (path, removed, allow) in cases {
        for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "TRACE"] {
            let r = h.call(method, path, None).await;
            if removed.contains(&method) {
                assert_eq!(r.status, StatusCode::GONE, "{method} {path}");
            } else if path.ends_with("/items") && (method == "GET" || method == "HEAD") {
                // GET .../items lists the items (a 404 here: no such project).
                assert_eq!(r.status, StatusCode::NOT_FOUND, "{method} {path}");
            } else {
                assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
                assert_eq!(r.headers["allow"], allow, "{method} {path}");
                assert_eq!(r.headers["content-type"], "application/problem+json");
            }
        }
    }
}

#[tokio::test]
async fn a_reported_status_may_carry_a_zero_fraction() {
    let h = harness();
    // An unknown webhook id is a 404: the body itself was valid.
    for status in [json!(500), json!(500.0)] {
        let r = h
            .call(
                "POST",
                "/webhooks/errors",
                Some(json!({"webhookId": "msg_x", "message": "m", "status": status})),
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{status}: {:?}", r.body);
    }
    for (status, code) in [
        (json!(500.5), "range"),
        (json!("500"), "type"),
        (json!(99), "range"),
        (json!(600.0), "range"),
    ] {
        let r = h
            .call(
                "POST",
                "/webhooks/errors",
                Some(json!({"webhookId": "msg_x", "message": "m", "status": status})),
            )
            .await;
        assert_eq!(
            located(&r),
            vec![("/status".to_owned(), code.to_owned())],
            "{status}"
        );
    }
}
