//! Router tests (oneshot, no network) on the embedded adapters: every route, every error
//! class of DESIGN.md section 3, tenant isolation on every project-scoped route.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pricing_api::auth::{Authenticator, LocalTokens, RateLimiter};
use pricing_api::{App, ROUTES, Stores, router};
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;
use serde_json::{Value, json};
use tower::ServiceExt;

const SECRET: &[u8] = b"router-test-secret-router-test-secret";

struct Harness {
    router: Router,
    store: EmbeddedStore,
    signer: Arc<Signer>,
    tokens: Arc<LocalTokens>,
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

fn harness_with(rate: Option<RateLimiter>) -> Harness {
    let store = EmbeddedStore::open_in_memory().expect("store");
    let key = StoredKey::generate("test-key".into(), Timestamp::now()).expect("key");
    let signer = Arc::new(Signer::from_keys(&[key]).expect("signer"));
    let tokens = Arc::new(LocalTokens::new(SECRET));
    let auth: Arc<dyn Authenticator> = tokens.clone();
    let mut app = App::new(
        Stores {
            store: store.clone(),
            queue: store.clone(),
        },
        signer.clone(),
        auth,
    );
    if let Some(rate) = rate {
        app = app.with_rate_limit(rate);
    }
    Harness {
        router: router(Arc::new(app)),
        store,
        signer,
        tokens,
    }
}

fn harness() -> Harness {
    harness_with(None)
}

impl Harness {
    fn token(&self, tenant: &str) -> String {
        self.tokens.issue(tenant, 600).expect("token")
    }

    async fn raw(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        tenant: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = tenant {
            req = req.header("authorization", format!("Bearer {}", self.token(t)));
        }
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        self.raw(req.body(body).expect("request")).await
    }

    async fn project(&self, tenant: &str, id: &str) {
        let r = self
            .call(
                "POST",
                "/projects",
                Some(tenant),
                Some(json!({"projectId": id, "name": id})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    async fn instance(&self, tenant: &str, project: &str, id: &str) {
        let r = self
            .call(
                "POST",
                &format!("/projects/{project}/instances"),
                Some(tenant),
                Some(json!({"instanceId": id})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    async fn process(&self, project: &str, instance: &str) {
        let key = InstanceKey::new(
            ProjectId::parse(project).expect("project id"),
            InstanceId::parse(instance).expect("instance id"),
        );
        Processor::new()
            .process(&self.store, &self.store, &key, Timestamp::now())
            .await
            .expect("processing");
    }
}

fn assert_problem(r: &Reply, status: StatusCode) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    assert_eq!(r.body["status"], status.as_u16());
    assert!(
        r.body["title"].is_string() && r.body["detail"].is_string(),
        "{:?}",
        r.body
    );
}

fn registrations() -> Value {
    json!({"entries": [
        {"type": "productRegistration", "transactionId": "p1", "data": {"productId": "ga", "capacity": 100}},
        {"type": "itemRegistration", "transactionId": "i1", "data": {
            "itemId": "ga-1", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 90, "default": 40}}},
        {"type": "itemSale", "transactionId": "s1", "data": {"itemId": "ga-1", "quantity": 3, "price": 40}},
    ]})
}

#[tokio::test]
async fn health_and_openapi_need_no_token_and_carry_the_version() {
    let h = harness();
    let r = h.call("GET", "/health", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["api-version"], "3.1.0");
    let r = h.call("GET", "/openapi.json", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["openapi"], "3.1.0");
}

#[tokio::test]
async fn openapi_describes_exactly_the_routes() {
    let h = harness();
    let doc: Value = serde_json::from_str(pricing_api::system::OPENAPI).unwrap();
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    documented.sort();
    let mut routed: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    routed.sort();
    assert_eq!(documented, routed);
    // Every listed route is really routed: never the 404/405 fallbacks.
    for (method, path) in ROUTES {
        let concrete = path
            .replace("{projectId}", "p")
            .replace("{instanceId}", "i")
            .replace("{itemId}", "x")
            .replace("{productId}", "y")
            .replace("{matchId}", "m");
        let r = h.call(method, &concrete, None, None).await;
        assert!(
            [StatusCode::OK, StatusCode::UNAUTHORIZED, StatusCode::GONE].contains(&r.status),
            "{method} {path}: {}",
            r.status
        );
    }
}

#[tokio::test]
async fn unauthenticated_requests_get_401_with_bearer_challenge() {
    let h = harness();
    let r = h.call("GET", "/projects", None, None).await;
    assert_problem(&r, StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    for auth in [
        "Bearer nonsense",
        "Basic abc",
        "Bearer",
        "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
    ] {
        let req = Request::builder()
            .uri("/projects")
            .header("authorization", auth)
            .body(Body::empty())
            .unwrap();
        assert_problem(&h.raw(req).await, StatusCode::UNAUTHORIZED);
    }
    // A token of another issuer's secret.
    let other = LocalTokens::new(b"another-secret-another-secret-xx")
        .issue("t", 60)
        .unwrap();
    let req = Request::builder()
        .uri("/projects")
        .header("authorization", format!("Bearer {other}"))
        .body(Body::empty())
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn projects_create_list_get_and_conflict() {
    let h = harness();
    let r = h.call("POST", "/projects", Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let generated = r.body["projectId"].as_str().unwrap().to_owned();
    assert_eq!(generated.len(), 26);
    h.project("acme", "festival").await;
    let r = h
        .call(
            "POST",
            "/projects",
            Some("acme"),
            Some(json!({"projectId": "festival"})),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT);
    let r = h.call("GET", "/projects", Some("acme"), None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let r = h.call("GET", "/projects?limit=1", Some("acme"), None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    let next = r.body["next"].as_str().expect("a next cursor").to_owned();
    let r = h
        .call(
            "GET",
            &format!("/projects?limit=1&cursor={next}"),
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["next"], Value::Null);
    let r = h.call("GET", "/projects", Some("other"), None).await;
    assert_eq!(r.body["items"], json!([]));
    let r = h
        .call("GET", "/projects/festival", Some("acme"), None)
        .await;
    assert_eq!(r.body["name"], "festival");
    let r = h.call("GET", "/projects?limit=0", Some("acme"), None).await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "POST",
            "/projects",
            Some("acme"),
            Some(json!({"parent": "x"})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"][0]["pointer"], "/parent");
}

#[tokio::test]
async fn instances_need_a_json_object_and_validate_meta() {
    let h = harness();
    h.project("acme", "p").await;
    let r = h
        .call("POST", "/projects/p/instances", Some("acme"), None)
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!([])),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["active"], false);
    let bad = json!({"meta": {"dates": [{"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T22:00:00Z"}, "tags": ["vip"]}]},
                     "timeZone": "Mars/Olympus"});
    let r = h
        .call("POST", "/projects/p/instances", Some("acme"), Some(bad))
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let pointers: Vec<&str> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.contains(&"/meta/dates/0/tags/0") && pointers.contains(&"/timeZone"),
        "{pointers:?}"
    );
    let good = json!({"instanceId": "show-1", "name": "Show", "timeZone": "Europe/Berlin", "active": true,
                      "meta": {"dates": [{"date": {"start": "2026-06-01T18:00:00Z", "end": "2026-06-01T22:00:00Z"}, "description": "Main show", "tags": ["main"]}]}});
    let r = h
        .call("POST", "/projects/p/instances", Some("acme"), Some(good))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["timeZone"], "Europe/Berlin");
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({"instanceId": "show-1"})),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT);
    let r = h
        .call("GET", "/projects/p/instances", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let r = h
        .call("GET", "/projects/p/instances/show-1", Some("acme"), None)
        .await;
    assert_eq!(r.body["meta"]["dates"][0]["tags"], json!(["main"]));
    assert_eq!(r.body["items"], json!([]));
}

#[tokio::test]
async fn put_updates_and_refuses_removed_fields_and_reactivation() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"name": "Renamed", "active": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["name"], "Renamed");
    assert_eq!(r.body["active"], true);
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"addMeta": {"x": 1}})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"][0]["code"], "removed");
    assert!(
        r.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("instanceMetadata")
    );
    // Deactivate (date in the past), then try to activate again.
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"deactivationDate": "2020-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["active"], false);
    assert_eq!(r.body["deactivated"], true);
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"active": true})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"deactivationDate": null})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn entries_are_validated_stored_signed_deduplicated_and_applied() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(registrations()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["received"], 3);
    assert_eq!(r.body["accepted"], 3);
    assert_eq!(
        r.body["entries"][2],
        json!({"index": 2, "transactionId": "s1", "status": "accepted", "sequence": 3})
    );
    // Same again: all duplicates, no 409.
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(registrations()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["accepted"], 0);
    assert_eq!(r.body["duplicates"], 3);
    assert_eq!(r.body["entries"][1]["status"], "duplicate");
    assert_eq!(r.body["entries"][1]["sequence"], 2);
    // Request-level id: entries without their own id get {requestId}#{index}.
    let body = json!({"requestId": "req-7", "entries": [{"type": "itemSale", "data": {"itemId": "ga-1", "price": 40}}]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.body["entries"][0]["transactionId"], "req-7#0");
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(body),
        )
        .await;
    assert_eq!(r.body["duplicates"], 1);
    // A bare array is accepted too.
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!([{"type": "itemReservation", "data": {"itemId": "ga-1", "reserved": 2}}])),
        )
        .await;
    assert_eq!(r.body["accepted"], 1);

    // The log, signed by the published key, paged by sequence.
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/entries?limit=2",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["sequence"], 1);
    assert_eq!(items[0]["transactionId"], "p1");
    assert!(h.signer.verify_jws(items[0]["jwt"].as_str().unwrap()));
    assert_eq!(r.body["next"], "2");
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/entries?after=2",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 3);
    assert_eq!(r.body["next"], Value::Null);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/entries?after=x",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);

    // The processor applies the log; details show counts without prices or periods.
    h.process("p", "i").await;
    let r = h
        .call("GET", "/projects/p/instances/i", Some("acme"), None)
        .await;
    assert_eq!(
        r.body["items"],
        json!([{"itemId": "ga-1", "productId": "ga", "dynamicPricing": true,
        "sold": 4, "reserved": 2, "available": 94, "oversold": 0}])
    );
    assert_eq!(r.body["products"][0]["capacity"], 100);
    assert_eq!(
        r.body["processing"],
        json!({"appliedSequence": 5, "lastSequence": 5})
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/ga-1",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(
        r.body["properties"]["priceSettings"],
        json!({"min": 10.0, "max": 90.0, "default": 40.0, "multiplier": 1.0})
    );
    assert_eq!(
        r.body["properties"]["salesPeriod"]["start"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(r.body["priceMatches"], json!([]));
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/products/ga",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["properties"]["pricingModel"]["type"], "pace");
    assert_eq!(r.body["items"], json!(["ga-1"]));
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/nope",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/products/nope",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn semantic_errors_become_entries_rejected_events() {
    use pricing_core::ports::EventStore;
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let body = json!({"entries": [
        {"type": "itemSale", "transactionId": "lost-sale", "data": {"itemId": "ghost", "price": 10}},
        {"type": "productRegistration", "transactionId": "ok", "data": {"productId": "ga", "capacity": 5}},
    ]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(body),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the submission only checks syntax"
    );
    assert_eq!(r.body["accepted"], 2);
    h.process("p", "i").await;
    let key = InstanceKey::new(
        ProjectId::parse("p").unwrap(),
        InstanceId::parse("i").unwrap(),
    );
    let events = h.store.list_events(&key, None, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "entries.rejected");
    let error = &events[0].data["errors"][0];
    assert_eq!(error["transactionId"], "lost-sale");
    assert_eq!(error["sequence"], 1);
    assert_eq!(error["code"], "unknownItem");
    assert_eq!(error["pointer"], "/data/itemId");
    // The valid entry after it was applied.
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/products/ga",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn client_jws_entries_are_stored_verbatim() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let other_key = StoredKey::generate("client-key".into(), Timestamp::now()).unwrap();
    let client = Signer::from_keys(&[other_key]).unwrap();
    let jws = client.sign_jws(br#"{"type":"productRegistration","transactionId":"cp","data":{"productId":"vip","capacity":5}}"#);
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!({"entries": [jws.clone()]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["entries"][0]["transactionId"], "cp");
    let r = h
        .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"][0]["jwt"], jws);
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!({"entries": ["not.a-jws"]})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"][0]["pointer"], "/entries/0");
}

#[tokio::test]
async fn invalid_entries_are_400_with_pointers_and_store_nothing() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let body = json!({"entries": [
        {"type": "productRegistration", "data": {"productId": "ok", "capacity": 1}},
        {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ok",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2027-01-01T00:00:00Z"},
            "priceSettings": {"min": -1, "max": 10, "default": 5, "constantPrice": 5}}},
        {"type": "instanceDates", "data": {}},
        {"type": "itemQuantity", "data": {"itemId": "a", "change": {"relative": 3}}},
    ]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(body),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let errors = r.body["errors"].as_array().unwrap();
    let find = |p: &str| {
        errors
            .iter()
            .find(|e| e["pointer"] == p)
            .unwrap_or_else(|| panic!("no error at {p}: {errors:?}"))
    };
    assert_eq!(find("/entries/1/data/priceSettings/min")["code"], "range");
    assert_eq!(
        find("/entries/1/data/priceSettings/constantPrice")["code"],
        "removed"
    );
    assert!(
        find("/entries/2/type")["message"]
            .as_str()
            .unwrap()
            .contains("instanceMetadata")
    );
    assert_eq!(find("/entries/3/data/change/relative")["code"], "removed");
    let r = h
        .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"], json!([]), "nothing is stored");
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!({"entries": []})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!({"nope": 1})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn long_error_lists_are_cut_and_counted() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let bad = json!({"type": "itemRemoval", "data": {"itemId": "not valid"}});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(json!({"entries": vec![bad; 150]})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"].as_array().unwrap().len(), 100);
    assert!(
        r.body["detail"]
            .as_str()
            .unwrap()
            .contains("150 invalid fields"),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["errors"][99]["pointer"], "/entries/99/data/itemId");
}

#[tokio::test]
async fn limits_are_4xx() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let one = json!({"type": "itemRemoval", "data": {"itemId": "a"}});
    let many = json!({"entries": vec![one; 1001]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(many),
        )
        .await;
    assert_problem(&r, StatusCode::PAYLOAD_TOO_LARGE);
    let big = json!({"entries": [{"type": "itemMetadata", "data": {"itemId": "a", "update": {"blob": "x".repeat(70 * 1024)}}}]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(big),
        )
        .await;
    assert_problem(&r, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.body["errors"][0]["pointer"], "/entries/0");
    let huge = json!({"entries": [{"type": "itemMetadata", "data": {"itemId": "a", "update": {"blob": "x".repeat(6 * 1024 * 1024)}}}]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(huge),
        )
        .await;
    assert_problem(&r, StatusCode::PAYLOAD_TOO_LARGE);
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "text/plain")
        .body(Body::from("hello"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unknown_paths_methods_removed_endpoints_and_versions() {
    let h = harness();
    assert_problem(
        &h.call("GET", "/nowhere", None, None).await,
        StatusCode::NOT_FOUND,
    );
    assert_problem(
        &h.call("DELETE", "/projects", Some("acme"), None).await,
        StatusCode::METHOD_NOT_ALLOWED,
    );
    for path in [
        "/projects/p/publicKeys",
        "/projects/p/instances/i/items",
        "/projects/p/subprojects",
    ] {
        let r = h.call("POST", path, Some("acme"), Some(json!({}))).await;
        assert_problem(&r, StatusCode::GONE);
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap()
                .contains("POST /projects")
                || r.body["detail"]
                    .as_str()
                    .unwrap()
                    .contains("signatureVerificationKeys"),
            "{:?}",
            r.body
        );
    }
    for (version, status) in [
        ("3", StatusCode::OK),
        ("3.1", StatusCode::OK),
        ("3.1.0", StatusCode::OK),
        ("2", StatusCode::BAD_REQUEST),
        ("3.2", StatusCode::BAD_REQUEST),
    ] {
        let req = Request::builder()
            .uri("/health")
            .header("api-version", version)
            .body(Body::empty())
            .unwrap();
        let r = h.raw(req).await;
        assert_eq!(r.status, status, "{version}");
        assert_eq!(r.headers["api-version"], "3.1.0");
    }
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let h = harness_with(Some(RateLimiter::new(0.5, 2.0)));
    assert_eq!(
        h.call("GET", "/projects", Some("acme"), None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        h.call("GET", "/projects", Some("acme"), None).await.status,
        StatusCode::OK
    );
    let r = h.call("GET", "/projects", Some("acme"), None).await;
    assert_problem(&r, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers.contains_key("retry-after"));
    // Another tenant has its own bucket.
    assert_eq!(
        h.call("GET", "/projects", Some("other"), None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn signature_keys_are_published_and_need_a_token() {
    let h = harness();
    assert_problem(
        &h.call("GET", "/webhooks/signatureVerificationKeys", None, None)
            .await,
        StatusCode::UNAUTHORIZED,
    );
    let r = h
        .call(
            "GET",
            "/webhooks/signatureVerificationKeys",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["keys"][0]["kid"], "test-key");
    assert_eq!(r.body["keys"][0]["algorithm"], "secp256r1-sha256");
}

/// Every project-scoped route answers 404 to another tenant, and changes nothing.
#[tokio::test]
async fn tenant_isolation_on_every_project_scoped_route() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(registrations()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    h.process("p", "i").await;
    let scoped: Vec<_> = ROUTES
        .iter()
        .filter(|(_, p)| p.starts_with("/projects/{projectId}"))
        .filter(|(_, p)| {
            !p.ends_with("publicKeys") && !p.ends_with("subprojects") && !p.ends_with("/items")
        })
        .collect();
    assert!(scoped.len() >= 9);
    for (method, path) in scoped {
        let concrete = path
            .replace("{projectId}", "p")
            .replace("{instanceId}", "i")
            .replace("{itemId}", "ga-1")
            .replace("{productId}", "ga")
            .replace("{matchId}", "m");
        let body = match *method {
            "POST" if concrete.ends_with("/entries") => Some(registrations()),
            "POST" | "PUT" => Some(json!({"name": "hijack"})),
            _ => None,
        };
        let r = h.call(method, &concrete, Some("intruder"), body).await;
        assert_problem(&r, StatusCode::NOT_FOUND);
        // The owner still sees the real thing.
        if *method == "GET" {
            assert_eq!(
                h.call(method, &concrete, Some("acme"), None).await.status,
                StatusCode::OK,
                "{concrete}"
            );
        }
    }
    let r = h
        .call("GET", "/projects/p/instances/i", Some("acme"), None)
        .await;
    assert_eq!(r.body["name"], "", "the intruder's PUT changed nothing");
    let r = h
        .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
        .await;
    assert_eq!(
        r.body["items"].as_array().unwrap().len(),
        3,
        "the intruder's entries were not stored"
    );
}

#[tokio::test]
async fn price_matches_calculations_instance_prices_and_history() {
    use pricing_core::ports::{EventStore, InstanceStore, WorkQueue};
    use pricing_core::recalc::{RecalcRequest, recalculate};
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let entries = json!({"entries": [
        {"type": "productRegistration", "data": {"productId": "ga", "capacity": 100, "pricingModel": "fixed"}},
        {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 100, "default": 40}}},
        {"type": "itemRegistration", "data": {"itemId": "b", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 100, "default": 60}}},
    ]});
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(entries),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    h.process("p", "i").await;

    // Rules: b follows a at half price; a following b would close a cycle.
    let path = "/projects/p/instances/i/priceMatches";
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"matchId": "half", "itemId": "b", "sourceItemId": "a", "ratio": 0.5})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"itemId": "a", "sourceItemId": "b"})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.body["detail"].as_str().unwrap().contains("half"),
        "the cycle is named: {:?}",
        r.body
    );
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"matchId": "half", "itemId": "a", "sourceItemId": "b"})),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT);
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"itemId": "a", "sourceItemId": "a"})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"itemId": "a", "sourceItemId": "b", "ratio": -1})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h.call("GET", path, Some("acme"), None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    let r = h
        .call("GET", "/projects/p/instances/i/items/b", Some("acme"), None)
        .await;
    assert_eq!(r.body["priceMatches"][0]["matchId"], "half");

    // On demand: 202 with a calculation id; the metadata comes back in the event.
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"metadata": {"reason": "launch"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let calculation_id = r.body["calculations"][0]["calculationId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(r.body["calculations"][0]["instanceId"], "i");
    // Drain the queue (the instance's FIFO group hands out one message at a time).
    let mut recalc = None;
    for _ in 0..5 {
        for m in h
            .store
            .receive(10, std::time::Duration::from_secs(30))
            .await
            .unwrap()
        {
            if let pricing_core::model::Message::Recalculate {
                calculation_id,
                trigger,
                metadata,
                ..
            } = &m.message
            {
                recalc = Some((calculation_id.clone(), *trigger, metadata.clone()));
            }
            h.store.ack(&m.receipt).await.unwrap();
        }
    }
    let recalc = recalc.expect("a Recalculate message");
    assert_eq!(recalc.0, calculation_id);
    let key = InstanceKey::new(
        ProjectId::parse("p").unwrap(),
        InstanceId::parse("i").unwrap(),
    );
    let instance = h.store.get_instance(&key).await.unwrap().unwrap();
    let request = RecalcRequest {
        calculation_id: recalc.0.clone(),
        trigger: recalc.1,
        metadata: recalc.2.clone(),
    };
    let calc = recalculate(
        &h.store,
        &h.store,
        &h.store,
        &instance,
        &request,
        Timestamp::now(),
    )
    .await
    .unwrap()
    .expect("calculated");
    assert_eq!(calc.sequence, 1);
    // Replaying the same message changes nothing.
    assert!(
        recalculate(
            &h.store,
            &h.store,
            &h.store,
            &instance,
            &request,
            Timestamp::now()
        )
        .await
        .unwrap()
        .is_none()
    );

    let r = h
        .call("GET", "/projects/p/instancePrices", Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"][0]["calculationId"], calculation_id.as_str());
    assert_eq!(
        r.body["items"][0]["prices"],
        json!([{"itemId": "a", "price": 40.0}, {"itemId": "b", "price": 20.0}])
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instancePrices?instanceId=i",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    let r = h
        .call(
            "GET",
            "/projects/p/instancePrices?instanceId=nope",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/b/priceHistory",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let entry = &r.body["items"][0];
    assert_eq!(entry["trigger"], "request");
    assert_eq!(entry["price"], 20.0);
    assert_eq!(entry["explanation"]["match"]["matchId"], "half", "{entry}");
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/ghost/priceHistory",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);

    let events = h.store.list_events(&key, None, 10).await.unwrap();
    let updated = events
        .iter()
        .find(|e| e.event_type == "prices.updated")
        .expect("a prices.updated event");
    assert_eq!(updated.data["metadata"], json!({"reason": "launch"}));
    assert_eq!(updated.data["calculationId"], calculation_id.as_str());
    assert_eq!(
        (
            updated.data["part"].as_u64(),
            updated.data["parts"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(
        updated.data["prices"][1],
        json!({"itemId": "b", "price": 20.0, "previousPrice": null, "changed": true})
    );

    // Bad requests change nothing.
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"instanceIds": ["i", "zzz"]})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"][0]["pointer"], "/instanceIds/1");
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"metadata": {"x": "y".repeat(9000)}})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert!(
        h.store
            .receive(10, std::time::Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );

    let r = h
        .call(
            "DELETE",
            "/projects/p/instances/i/priceMatches/half",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = h
        .call(
            "DELETE",
            "/projects/p/instances/i/priceMatches/half",
            Some("acme"),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);
}
