//! Router tests (oneshot, no network) on the embedded adapters: every route, every error
//! class of DESIGN.md section 3, tenant isolation on every project-scoped route.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::TestApp;
use http_body_util::BodyExt;
use pricing_api::ROUTES;
use pricing_api::auth::LocalTokens;
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::Message;
use pricing_core::ports::WorkQueue;
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_core::webhooks::CallbackPolicy;
use pricing_embedded::EmbeddedStore;
use serde_json::{Value, json};
use tower::ServiceExt;

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
    /// The body's length in bytes.
    len: usize,
}

/// A harness whose app `configure` adjusts (rate limit, callback policy).
fn harness_with(configure: impl FnOnce(TestApp) -> TestApp) -> Harness {
    let built = common::app_with(configure);
    Harness {
        router: built.router,
        store: built.store,
        signer: built.signer,
        tokens: built.tokens,
    }
}

fn harness() -> Harness {
    harness_with(|app| app)
}

impl Harness {
    fn token(&self, tenant: &str) -> String {
        self.tokens.issue(tenant, 600).expect("token")
    }

    async fn raw(&self, request: Request<Body>) -> Reply {
        let (status, headers, bytes) = common::respond(&self.router, request).await;
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
            len: bytes.len(),
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

    /// Creates a subscription at `path` (a scope's subscriptions) and returns its id.
    async fn subscription(&self, tenant: &str, path: &str) -> String {
        let r = self
            .call("POST", path, Some(tenant), Some(hook(tenant)))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["subscriptionId"].as_str().expect("id").to_owned()
    }

    /// Every message waiting in the queues, instance work and webhooks (received and
    /// acknowledged).
    async fn drain(&self) -> Vec<Message> {
        let mut out = Vec::new();
        out.extend(drain_queue(&self.store).await);
        out.extend(drain_queue(&self.store.webhook_queue()).await);
        out
    }

    async fn process(&self, project: &str, instance: &str) {
        let key = InstanceKey::new(
            pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
            ProjectId::parse(project).expect("project id"),
            InstanceId::parse(instance).expect("instance id"),
        );
        Processor::new()
            .process(&self.store, &self.store, &key, Timestamp::now())
            .await
            .expect("processing");
    }
}

/// Project `id` of the tenant `acme`.
fn acme(id: &ProjectId) -> pricing_core::ids::ProjectKey {
    pricing_core::ids::ProjectKey::new(
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
        id.clone(),
    )
}

/// Every message waiting in one queue (received and acknowledged).
async fn drain_queue(queue: &impl WorkQueue) -> Vec<Message> {
    let mut out = Vec::new();
    // A FIFO group hands out one message at a time: a few rounds empty the queue.
    for _ in 0..5 {
        for m in queue
            .receive(10, Duration::from_secs(30))
            .await
            .expect("receive")
        {
            queue.ack(&m.receipt).await.expect("ack");
            out.push(m.message);
        }
    }
    out
}

/// A subscription request body for `tenant`'s receiver.
fn hook(tenant: &str) -> Value {
    json!({"callbackUrl": format!("https://{tenant}.example.com/hook")})
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

/// The pointer and code of a problem's first field error.
fn first_error(r: &Reply) -> (&Value, &Value) {
    (
        &r.body["errors"][0]["pointer"],
        &r.body["errors"][0]["code"],
    )
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
        // The standalone binary routes the token endpoint itself (tests/openapi.rs).
        if path == "/oauth2/token" {
            continue;
        }
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
            .replace("{matchId}", "m")
            .replace("{subscriptionId}", "s");
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
    let r = h.raw(req).await;
    assert_problem(&r, StatusCode::UNAUTHORIZED);
    // A token sent and refused says so (RFC 6750 section 3.1); no token is a plain challenge.
    assert_eq!(
        r.headers["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    // Two Authorization headers: refused whichever comes first (an outside probe found
    // the first one taken, so a valid token followed by any other header passed).
    let valid = format!("Bearer {}", h.token("acme"));
    for pair in [
        [valid.as_str(), "Bearer junk"],
        ["Bearer junk", valid.as_str()],
    ] {
        let req = Request::builder()
            .uri("/projects")
            .header("authorization", pair[0])
            .header("authorization", pair[1])
            .body(Body::empty())
            .unwrap();
        let r = h.raw(req).await;
        // RFC 6750 section 3.1: a repeated parameter is `invalid_request`, a 400.
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap()
                .contains("one Authorization")
        );
        assert_eq!(
            r.headers["www-authenticate"],
            "Bearer error=\"invalid_request\""
        );
    }
    let req = Request::builder()
        .uri("/projects")
        .header("authorization", valid.as_str())
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.raw(req).await.status, StatusCode::OK);
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
    // `.` and `..` are URL path segments: a resource of that id could not be addressed.
    for (path, body, pointer) in [
        ("/projects", json!({"projectId": ".."}), "/projectId"),
        (
            "/projects/festival/instances",
            json!({"instanceId": "."}),
            "/instanceId",
        ),
    ] {
        let r = h.call("POST", path, Some("acme"), Some(body)).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{:?}", r.body);
    }
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
async fn price_matches_page_and_every_listing_refuses_a_cursor_it_could_not_have_made() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let path = "/projects/p/instances/i/priceMatches";
    // Created out of id order: the listing is in match id order.
    for n in [3, 1, 4, 0, 2] {
        let r = h
            .call(
                "POST",
                path,
                Some("acme"),
                Some(json!({"matchId": format!("m{n}"), "itemId": format!("t{n}"), "sourceItemId": "src"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let (rules, pages) = every_page(&h, &format!("{path}?limit=2"), "cursor").await;
    let ids: Vec<&str> = rules
        .iter()
        .map(|r| r["matchId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(pages, 3);
    let r = h.call("GET", path, Some("acme"), None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 5);
    assert_eq!(r.body["next"], Value::Null);
    // Without a limit, every rule in one page, as the listing always answered (past the
    // other listings' default of 100): a client that never paged it still reads them all.
    for n in 5..105 {
        let r = h
            .call(
                "POST",
                path,
                Some("acme"),
                Some(json!({"matchId": format!("m{n:03}"), "itemId": format!("t{n}"), "sourceItemId": "src"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let r = h.call("GET", path, Some("acme"), None).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 105);
    assert_eq!(r.body["next"], Value::Null);
    // Paging parameters are checked as on every listing (they were ignored here).
    for query in [
        "limit=0",
        "limit=-5",
        "limit=abc",
        "limit=1&limit=2",
        "cursor=a%20b",
    ] {
        let r = h
            .call("GET", &format!("{path}?{query}"), Some("acme"), None)
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }
    // A cursor that is not an id of what a listing lists is a 400 (these took any text
    // as a position, and answered an empty page).
    h.subscription("acme", "/projects/p/subscriptions").await;
    for listing in [
        "/projects",
        "/projects/p/instances",
        "/projects/p/subscriptions",
        "/projects/p/instances/i/subscriptions",
        path,
    ] {
        for cursor in ["a%20b", "%FF", "x%2Fy"] {
            let r = h
                .call(
                    "GET",
                    &format!("{listing}?cursor={cursor}"),
                    Some("acme"),
                    None,
                )
                .await;
            assert_problem(&r, StatusCode::BAD_REQUEST);
            assert!(
                r.body["detail"]
                    .as_str()
                    .unwrap()
                    .contains("is not a cursor of this listing"),
                "{listing}?cursor={cursor}: {:?}",
                r.body
            );
        }
        // A well-formed id past the last is an empty last page. Subscription ids are
        // generated ULIDs, so there any other id is a 400 (`zzz` and `-5` were pages).
        let subscriptions = listing.ends_with("/subscriptions");
        let past_last = if subscriptions {
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
        } else {
            "zzz"
        };
        let r = h
            .call(
                "GET",
                &format!("{listing}?cursor={past_last}"),
                Some("acme"),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{listing}: {:?}", r.body);
        assert_eq!(r.body["next"], Value::Null);
        if subscriptions {
            for cursor in ["zzz", "-5", "01ARZ3NDEKTSV4RRFFQ69G5FA"] {
                let r = h
                    .call(
                        "GET",
                        &format!("{listing}?cursor={cursor}"),
                        Some("acme"),
                        None,
                    )
                    .await;
                assert_problem(&r, StatusCode::BAD_REQUEST);
            }
        }
    }
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
    // Dates are kept in UTC, as every time on the wire.
    let offset = json!({"instanceId": "show-2", "meta": {"dates": [{"date":
        {"start": "2027-07-01T18:00:00+02:00", "end": "2027-07-01T23:00:00+02:00"}}]}});
    let r = h
        .call("POST", "/projects/p/instances", Some("acme"), Some(offset))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let utc = json!({"start": "2027-07-01T16:00:00Z", "end": "2027-07-01T21:00:00Z"});
    assert_eq!(r.body["meta"]["dates"][0]["date"], utc);
    let r = h
        .call("GET", "/projects/p/instances/show-2", Some("acme"), None)
        .await;
    assert_eq!(r.body["meta"]["dates"][0]["date"], utc);
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
    // Active with a date already passed, in one request: refused, not silently inactive.
    let past = json!({"active": true, "deactivationDate": "2020-01-01T00:00:00Z"});
    h.instance("acme", "p", "j").await;
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/j",
            Some("acme"),
            Some(past.clone()),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
    let r = h
        .call("GET", "/projects/p/instances/j", Some("acme"), None)
        .await;
    assert_eq!(r.body["deactivationDate"], Value::Null, "nothing changed");
    let mut create = past;
    create["instanceId"] = json!("k");
    let r = h
        .call("POST", "/projects/p/instances", Some("acme"), Some(create))
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
}

/// Three PUTs at once on one instance each change what they name: none undoes another.
/// (Each used to replace the whole record as it had read it: an outside probe lost a field
/// in 11 of 30 rounds of two.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_each_keep_their_change() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let put = |body: Value| h.call("PUT", "/projects/p/instances/i", Some("acme"), Some(body));
    for round in 0..30 {
        let name = format!("name-{round}");
        let zone = ["Asia/Tokyo", "Europe/Berlin", "America/Lima"][round % 3];
        let date = format!("2099-01-{:02}T00:00:00Z", round % 28 + 1);
        let (a, b, c) = tokio::join!(
            put(json!({"name": name})),
            put(json!({"timeZone": zone})),
            put(json!({"deactivationDate": date})),
        );
        for r in [&a, &b, &c] {
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        }
        let r = h
            .call("GET", "/projects/p/instances/i", Some("acme"), None)
            .await;
        assert_eq!(
            (
                &r.body["name"],
                &r.body["timeZone"],
                &r.body["deactivationDate"]
            ),
            (&json!(name), &json!(zone), &json!(date)),
            "round {round}: a change was lost"
        );
    }
}

/// A time RFC 3339 cannot write back in UTC is refused, and a leap second is the next
/// second's start. (An outside probe stored `9999-12-31T23:59:59-23:59` as `+10000-…`, after
/// which every read of the instance and of the project's listing was a 500; a leap second
/// made the schedule index's NOT NULL fail: a 409 "already exists" on create, a 500 on PUT.)
#[tokio::test]
async fn dates_are_ones_rfc_3339_writes_back_and_a_leap_second_is_the_next_second() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    for date in ["9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+00:01"] {
        for (method, path, body) in [
            (
                "POST",
                "/projects/p/instances",
                json!({"instanceId": "far", "active": true, "deactivationDate": date}),
            ),
            (
                "PUT",
                "/projects/p/instances/i",
                json!({"active": true, "deactivationDate": date}),
            ),
        ] {
            let r = h.call(method, path, Some("acme"), Some(body)).await;
            assert_problem(&r, StatusCode::BAD_REQUEST);
            assert_eq!(
                r.body["errors"][0]["pointer"], "/deactivationDate",
                "{:?}",
                r.body
            );
        }
    }
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({"instanceId": "leap", "active": true, "deactivationDate": "2030-06-30T23:59:60Z"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["deactivationDate"], "2030-07-01T00:00:00Z");
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/leap",
            Some("acme"),
            Some(json!({"active": false})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/i",
            Some("acme"),
            Some(json!({"deactivationDate": "2031-12-31T23:59:60Z"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .call("GET", "/projects/p/instances", Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(2));
}

/// `instance.deactivated` is sent for an instance whose flag a user turned off after its
/// date passed, before the scheduler saw it (the record used to say "announced" then),
/// and for one created with its date already passed.
#[tokio::test]
async fn a_deactivation_date_that_passed_is_announced_whatever_was_written_since() {
    use pricing_core::ports::{ActiveInstances, EventStore};
    let h = harness();
    h.project("acme", "p").await;
    // Soon enough for a quick test, late enough that the POST of an active instance is
    // checked before it on a loaded machine.
    let soon = Timestamp(Timestamp::now().0 + chrono::Duration::milliseconds(1_500));
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({"instanceId": "late", "active": true, "deactivationDate": soon})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({"instanceId": "past", "deactivationDate": "2020-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let left = (soon.0 - Timestamp::now().0).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(100)).await;
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/late",
            Some("acme"),
            Some(json!({"active": false})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let tenant = pricing_core::ids::TenantId::from_claim("acme").unwrap();
    let now = Timestamp::now();
    let due = h.store.due_instances(&tenant, now, 10).await.unwrap();
    let mut announced = Vec::new();
    for entry in &due.items {
        let done = pricing_core::scheduler::handle_due(&h.store, &h.store, entry, now)
            .await
            .unwrap();
        assert_eq!(done, pricing_core::scheduler::Due::Deactivated);
        let events = h.store.list_events(&entry.key, None, 10).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type, "instance.deactivated");
        announced.push(entry.key.instance_id.to_string());
    }
    announced.sort();
    assert_eq!(announced, ["late", "past"]);
    // Announced, they leave the index; a later write does not bring them back.
    let r = h
        .call(
            "PUT",
            "/projects/p/instances/late",
            Some("acme"),
            Some(json!({"name": "renamed"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let due = h
        .store
        .due_instances(&tenant, Timestamp::now(), 10)
        .await
        .unwrap();
    assert!(due.items.is_empty(), "{:?}", due.items);
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
    // Every property DESIGN.md lists is there, null when unset.
    assert_eq!(r.body["properties"]["dynamicPricingPeriod"], Value::Null);
    assert!(r.body["properties"].get("dynamicPricingPeriod").is_some());
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/products/ga",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["properties"]["pricingModel"]["type"], "revenue");
    assert_eq!(r.body["properties"]["capacity"], 100);
    assert!(r.body["properties"]["recalculation"].is_null());
    assert!(r.body["properties"].get("recalculation").is_some());
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
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
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
    // A body declared larger than the limit: refused before a byte of it is read (an
    // outside probe saw `100 Continue`, then a 408 when the client waited).
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json")
        .header("content-length", (6u64 << 20).to_string())
        .body(Body::from("{}"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::PAYLOAD_TOO_LARGE);
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "text/plain")
        .body(Body::from("hello"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A media type that is not JSON is refused before the body is read (this one never
    // ends), as before `100 Continue`; a JSON body in another charset than UTF-8 too.
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "text/plain")
        .header("content-length", "1000000")
        .body(Body::from_stream(futures_util::stream::pending::<
            Result<axum::body::Bytes, std::io::Error>,
        >()))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json; charset=\"UTF-16\"")
        .body(Body::from("{}"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A body whose framing breaks is a 400 that closes the connection, not a 413.
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json")
        .body(Body::from_stream(futures_util::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("invalid chunk size")),
        ])))
        .unwrap();
    let r = h.raw(req).await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.headers["connection"], "close");
    // Two media types joined in one header: refused as two headers are, not the first
    // one taken (a proxy may read the other).
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header(
            "content-type",
            "application/json; charset=utf-8, text/plain",
        )
        .body(Body::from("{}"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json")
        .body(Body::from("{not json"))
        .unwrap();
    let r = h.raw(req).await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(first_error(&r), (&json!(""), &json!("json")));
    // A member named twice says two things (serde_json would keep the last): refused,
    // with where, and nothing stored.
    let log = |r: &Reply| r.body["items"].as_array().map(Vec::len);
    let before = h
        .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
        .await;
    let twice = r#"{"entries": [{"type": "itemSale", "data": {"itemId": "a", "quantity": 1, "quantity": 900}}]}"#;
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/instances/i/entries")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "application/json")
        .body(Body::from(twice))
        .unwrap();
    let r = h.raw(req).await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(first_error(&r), (&json!(""), &json!("duplicateMember")));
    let message = r.body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"quantity\" twice") && message.contains("line 1 column"),
        "{message}"
    );
    let after = h
        .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
        .await;
    assert_eq!(log(&after), log(&before));
    assert!(log(&after).is_some(), "{:?}", after.body);
    // An If-Match naming an entity tag matches nothing (none is ever sent): 412, nothing
    // stored; `If-Match: *` is left to the request.
    let sale = r#"{"entries": [{"type": "itemSale", "data": {"itemId": "a", "quantity": 1, "price": 10}}]}"#;
    for (condition, status) in [
        ("\"bogus\"", StatusCode::PRECONDITION_FAILED),
        ("W/\"1\", *", StatusCode::PRECONDITION_FAILED),
        ("*", StatusCode::OK),
    ] {
        let req = Request::builder()
            .method("POST")
            .uri("/projects/p/instances/i/entries")
            .header("authorization", format!("Bearer {}", h.token("acme")))
            .header("content-type", "application/json")
            .header("if-match", condition)
            .body(Body::from(sale))
            .unwrap();
        let r = h.raw(req).await;
        assert_eq!(r.status, status, "{condition}: {:?}", r.body);
        let now = h
            .call("GET", "/projects/p/instances/i/entries", Some("acme"), None)
            .await;
        let grew = log(&now) != log(&before);
        assert_eq!(grew, status == StatusCode::OK, "{condition}");
    }
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
    // A path segment that is not UTF-8 names nothing: a problem, not axum's plain text.
    for path in ["/projects/%FF", "/projects/p/instances/%FF/entries"] {
        assert_problem(
            &h.call("GET", path, Some("acme"), None).await,
            StatusCode::NOT_FOUND,
        );
    }
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
    // A body with a content coding is a 415 and changes nothing; `identity` is no coding.
    for (coding, status) in [
        ("gzip", StatusCode::UNSUPPORTED_MEDIA_TYPE),
        ("br", StatusCode::UNSUPPORTED_MEDIA_TYPE),
        ("identity, gzip", StatusCode::UNSUPPORTED_MEDIA_TYPE),
        ("identity", StatusCode::CREATED),
    ] {
        let id = format!("coded-{}", coding.len());
        let req = Request::builder()
            .method("POST")
            .uri("/projects")
            .header("authorization", format!("Bearer {}", h.token("acme")))
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            .body(Body::from(json!({"projectId": id}).to_string()))
            .unwrap();
        let r = h.raw(req).await;
        assert_eq!(r.status, status, "{coding}: {:?}", r.body);
        let read = h
            .call("GET", &format!("/projects/{id}"), Some("acme"), None)
            .await;
        let stored = read.status == StatusCode::OK;
        assert_eq!(stored, status == StatusCode::CREATED, "{coding}");
    }
    // Two Content-Type headers are a 415 in either order (the first one won: json then
    // text was a 201, the reverse a 415).
    for (first, second) in [
        ("application/json", "text/plain"),
        ("text/plain", "application/json"),
        ("application/json", "application/json"),
    ] {
        let req = Request::builder()
            .method("POST")
            .uri("/projects")
            .header("authorization", format!("Bearer {}", h.token("acme")))
            .header("content-type", first)
            .header("content-type", second)
            .body(Body::from(json!({"projectId": "two-types"}).to_string()))
            .unwrap();
        let r = h.raw(req).await;
        assert_eq!(
            r.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{first}, {second}"
        );
    }
    let read = h
        .call("GET", "/projects/two-types", Some("acme"), None)
        .await;
    assert_eq!(read.status, StatusCode::NOT_FOUND);
    // Several lines are read as one comma-joined line (RFC 9110 section 5.3), in any order.
    for (lines, status) in [
        (&["3.1", "4"][..], StatusCode::BAD_REQUEST),
        (&["4", "3.1"][..], StatusCode::BAD_REQUEST),
        (&["3.1, 4"][..], StatusCode::BAD_REQUEST),
        (&["3.1", "3"][..], StatusCode::OK),
    ] {
        let mut req = Request::builder().uri("/health");
        for line in lines {
            req = req.header("api-version", *line);
        }
        let r = h.raw(req.body(Body::empty()).unwrap()).await;
        assert_eq!(r.status, status, "{lines:?}");
    }
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let h = harness_with(|app| app.with_rate_limit(pricing_embedded::TokenBuckets::new(0.5, 2.0)));
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

/// Project ids are scoped by tenant: another tenant's project id is neither revealed by a
/// 409 nor taken. Both tenants create `summer` with an instance `day-1`, and each sees,
/// writes and lists only its own.
#[tokio::test]
async fn project_ids_are_scoped_by_tenant() {
    let h = harness();
    h.project("acme", "summer").await;
    let r = h
        .call(
            "POST",
            "/projects",
            Some("acme"),
            Some(json!({"projectId": "summer"})),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT);
    // Another tenant gets its own `summer`, not a 409 that reveals acme's.
    let r = h
        .call(
            "POST",
            "/projects",
            Some("globex"),
            Some(json!({"projectId": "summer", "name": "Globex summer"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    h.instance("acme", "summer", "day-1").await;
    h.instance("globex", "summer", "day-1").await;
    for (tenant, name) in [("acme", "summer"), ("globex", "Globex summer")] {
        let r = h.call("GET", "/projects/summer", Some(tenant), None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["name"], name, "{tenant} reads its own project");
        let r = h.call("GET", "/projects", Some(tenant), None).await;
        assert_eq!(
            r.body["items"].as_array().map(Vec::len),
            Some(1),
            "{tenant}"
        );
    }
    let body = json!({"entries": [{"type": "itemSale", "data": {"itemId": "ga-1", "price": 40}}]});
    let r = h
        .call(
            "POST",
            "/projects/summer/instances/day-1/entries",
            Some("acme"),
            Some(body),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let entries = |tenant: &'static str| {
        let h = &h;
        async move {
            h.call(
                "GET",
                "/projects/summer/instances/day-1/entries",
                Some(tenant),
                None,
            )
            .await
            .body["items"]
                .as_array()
                .map(Vec::len)
        }
    };
    assert_eq!(entries("acme").await, Some(1));
    assert_eq!(
        entries("globex").await,
        Some(0),
        "the namesake instance has its own log"
    );
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
    let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
    let scoped: Vec<_> = ROUTES
        .iter()
        .filter(|(_, p)| p.starts_with("/projects/{projectId}"))
        .filter(|(m, p)| {
            let gone = p.ends_with("publicKeys")
                || p.ends_with("subprojects")
                || (*m == "POST" && p.ends_with("/items"));
            !gone
        })
        .collect();
    assert!(scoped.len() >= 9);
    for (method, path) in scoped {
        let concrete = path
            .replace("{projectId}", "p")
            .replace("{instanceId}", "i")
            .replace("{itemId}", "ga-1")
            .replace("{productId}", "ga")
            .replace("{matchId}", "m")
            .replace("{subscriptionId}", &subscription);
        let body = match *method {
            "POST" if concrete.ends_with("/entries") => Some(registrations()),
            "POST" if concrete.ends_with("/subscriptions") => Some(hook("intruder")),
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
    let r = h
        .call("GET", "/projects/p/subscriptions", Some("acme"), None)
        .await;
    assert_eq!(
        r.body["items"],
        json!([{"subscriptionId": subscription, "projectId": "p",
                "callbackUrl": "https://acme.example.com/hook",
                "events": ["prices.updated", "entries.rejected", "instance.deactivated"],
                "description": "", "status": "active",
                "createdAt": r.body["items"][0]["createdAt"]}]),
        "the intruder neither deleted nor added a subscription"
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/subscriptions",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"], json!([]));
    assert!(
        h.drain()
            .await
            .iter()
            .all(|m| !matches!(m, Message::Trigger { .. })),
        "the intruder's trigger was not enqueued"
    );
}

#[tokio::test]
async fn price_matches_calculations_instance_prices_and_history() {
    use pricing_core::ports::{EventStore, InstanceStore};
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
        {"type": "itemRegistration", "data": {"itemId": "gone", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 100, "default": 60}}},
        {"type": "itemRemoval", "data": {"itemId": "gone"}},
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
    // A match id is a URL path segment: not `.` or `..`.
    let r = h
        .call(
            "POST",
            path,
            Some("acme"),
            Some(json!({"matchId": "..", "itemId": "a", "sourceItemId": "b"})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["errors"][0]["pointer"], "/matchId", "{:?}", r.body);
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
    // A removed item is gone for good: a new rule naming it could never apply (an
    // outside probe found such rules created, 201).
    for (body, member) in [
        (
            json!({"itemId": "a", "sourceItemId": "gone"}),
            "/sourceItemId",
        ),
        (json!({"itemId": "gone", "sourceItemId": "a"}), "/itemId"),
    ] {
        let r = h.call("POST", path, Some("acme"), Some(body)).await;
        assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(r.body["errors"][0]["pointer"], member, "{:?}", r.body);
        assert_eq!(r.body["errors"][0]["code"], "itemRemoved", "{:?}", r.body);
    }
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
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
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

    // `limit` counts instances with `instanceId=` too; an instance asked for twice is
    // listed once; cursors are opaque and a foreign one is a 400, not an empty page.
    h.instance("acme", "p", "j").await;
    h.instance("acme", "p", "k").await;
    for first in [
        "/projects/p/instancePrices?limit=1",
        "/projects/p/instancePrices?instanceId=k&instanceId=i&instanceId=j&instanceId=i&limit=1",
    ] {
        let mut url = first.to_owned();
        let mut listed = Vec::new();
        loop {
            let r = h.call("GET", &url, Some("acme"), None).await;
            assert_eq!(r.status, StatusCode::OK, "{url}: {:?}", r.body);
            let items = r.body["items"].as_array().expect("items");
            assert_eq!(items.len(), 1, "{url}: one instance a page");
            listed.push(items[0]["instanceId"].as_str().expect("id").to_owned());
            let Some(next) = r.body["next"].as_str() else {
                break;
            };
            assert!(next.starts_with('@'), "an opaque cursor: {next}");
            url = format!("{first}&cursor={next}");
        }
        let expected = if first.contains("instanceId") {
            ["k", "i", "j"]
        } else {
            ["i", "j", "k"]
        };
        assert_eq!(listed, expected, "{first}");
    }
    for cursor in ["zzz", "i", "@", "@e30"] {
        let r = h
            .call(
                "GET",
                &format!("/projects/p/instancePrices?cursor={cursor}"),
                Some("acme"),
                None,
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }
    // A cursor of the right form that this listing cannot have handed out is a 400 too,
    // not an empty page: after an instance the project does not have, an offset at or
    // past the end of the calculation's prices (instance i has 2), an offset without one.
    let forged = |resume: Value| {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("@{}", b64.encode(resume.to_string()))
    };
    for (query, resume) in [
        ("", json!({"after": "zzz"})),
        ("", json!({"after": "no/id"})),
        ("", json!({"calc": calculation_id, "offset": 99_999_999})),
        ("", json!({"calc": calculation_id, "offset": 2})),
        ("", json!({"offset": 1})),
        (
            "instanceId=i&",
            json!({"calc": calculation_id, "offset": 99_999_999}),
        ),
        (
            "instanceId=i&",
            json!({"calc": calculation_id, "offset": 2}),
        ),
    ] {
        let url = format!(
            "/projects/p/instancePrices?{query}cursor={}",
            forged(resume)
        );
        let r = h.call("GET", &url, Some("acme"), None).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }
    // What such a cursor says when the listing could have handed it out is read as before.
    for (query, resume) in [
        ("", json!({"after": "i"})),
        ("", json!({"calc": calculation_id, "offset": 1})),
        (
            "instanceId=i&",
            json!({"calc": calculation_id, "offset": 1}),
        ),
    ] {
        let url = format!(
            "/projects/p/instancePrices?{query}cursor={}",
            forged(resume)
        );
        let r = h.call("GET", &url, Some("acme"), None).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {:?}", r.body);
        assert!(
            !r.body["items"].as_array().expect("items").is_empty(),
            "{url}"
        );
    }
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
    // A removed item's history stays readable (the record of what it sold), and so do its
    // details, marked removed, with nothing left to sell (they were a 404: an early-bird
    // item removed when its phase ended lost its history).
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/gone/priceHistory",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/items/gone",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["removed"], true, "{:?}", r.body);
    assert_eq!(
        (r.body["available"].as_u64(), r.body["reserved"].as_u64()),
        (Some(0), Some(0))
    );
    let r = h
        .call("GET", "/projects/p/instances/i/items/b", Some("acme"), None)
        .await;
    assert!(r.body.get("removed").is_none(), "{:?}", r.body);
    // A cursor the listing did not make, of an item that exists: the request is wrong.
    for cursor in ["abc", "9223372036854775808", "999"] {
        let r = h
            .call(
                "GET",
                &format!("/projects/p/instances/i/items/b/priceHistory?cursor={cursor}"),
                Some("acme"),
                None,
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }

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
    // Metadata nested deeper than a document may be is refused: it is stored inside the
    // calculation's events, which must decode again (126 levels made an undecodable
    // record that stopped the instance's webhooks and answered its events with 500).
    let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }));
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"metadata": nested(33)})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(first_error(&r), (&json!("/metadata"), &json!("tooDeep")));
    // Any body: at most 64 levels. At the limits, both are taken.
    for body in [
        json!({"instanceIds": ["i"], "metadata": nested(32)}),
        json!({"instanceIds": ["i"], "metadata": {"x": [nested(30)]}}),
    ] {
        let r = h
            .call(
                "POST",
                "/projects/p/calculatePrices",
                Some("acme"),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
        assert_eq!(drain_queue(&h.store).await.len(), 1);
    }
    // A 64-level body whose metadata is too deep is refused at the metadata, not as a body.
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"metadata": nested(63)})),
        )
        .await;
    assert_eq!(r.body["errors"][0]["pointer"], "/metadata", "{:?}", r.body);
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"metadata": nested(126)})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(first_error(&r), (&json!(""), &json!("tooDeep")));
    assert!(
        h.store
            .receive(10, std::time::Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );

    // Past its deactivation date an instance's pricing has ended (INTERFACE.md): named, a
    // 422 and nothing enqueued; project-wide, left out. An instance named twice is
    // calculated once.
    let r = h
        .call(
            "POST",
            "/projects/p/instances",
            Some("acme"),
            Some(json!({"instanceId": "gone", "active": false, "deactivationDate": "2020-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"instanceIds": ["i", "gone"]})),
        )
        .await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        first_error(&r),
        (&json!("/instanceIds/1"), &json!("instanceDeactivated"))
    );
    // With an unknown id too, the request is a bad one: a 400 naming the unknown id, once.
    let r = h
        .call(
            "POST",
            "/projects/p/calculatePrices",
            Some("acme"),
            Some(json!({"instanceIds": ["gone", "zzz", "zzz"]})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body["errors"].as_array().map(Vec::len),
        Some(1),
        "{:?}",
        r.body
    );
    assert_eq!(
        first_error(&r),
        (&json!("/instanceIds/1"), &json!("unknownInstance"))
    );
    assert!(
        h.store
            .receive(10, std::time::Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    for body in [json!({"instanceIds": ["i", "i"]}), json!({})] {
        let r = h
            .call(
                "POST",
                "/projects/p/calculatePrices",
                Some("acme"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
        let calculated: Vec<&Value> = r.body["calculations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["instanceId"])
            .collect();
        if body.get("instanceIds").is_some() {
            assert_eq!(calculated, [&json!("i")], "{body}");
        } else {
            assert!(calculated.contains(&&json!("i")), "{calculated:?}");
            assert!(!calculated.contains(&&json!("gone")), "{calculated:?}");
        }
        let sent = drain_queue(&h.store).await.len();
        assert_eq!(sent, calculated.len(), "{body}");
    }

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

/// Stores `n` deliveries for a subscription, one a second apart (the oldest first), as the
/// dispatcher would; returns their webhook ids.
async fn stored_deliveries(
    h: &Harness,
    project: &str,
    subscription: &str,
    n: usize,
) -> Vec<String> {
    use pricing_core::ports::{DeliveryStore, SubscriptionStore};
    use pricing_core::webhooks::Delivery;
    let project_id = ProjectId::parse(project).expect("project id");
    let sub = h
        .store
        .get_subscription(
            &acme(&project_id),
            &pricing_core::ids::SubscriptionId::parse(subscription).expect("subscription id"),
        )
        .await
        .expect("reading a subscription")
        .expect("subscription");
    let start = Timestamp::now().millis();
    let mut ids = Vec::new();
    for k in 0..n {
        let at =
            Timestamp::from_millis(start + 1000 * i64::try_from(k).expect("small")).expect("time");
        let event = pricing_core::model::Event {
            id: format!("evt_{subscription}_{k}"),
            event_type: "prices.updated".into(),
            project_id: project_id.clone(),
            instance_id: InstanceId::parse("i").expect("instance id"),
            created_at: at,
            data: json!({"k": k}),
        };
        let delivery = Delivery::new(&event, &sub, at);
        ids.push(delivery.webhook_id.clone());
        let stored = h
            .store
            .create_deliveries(&[delivery])
            .await
            .expect("stored");
        assert_eq!(stored.len(), 1);
    }
    ids
}

#[tokio::test]
async fn subscriptions_are_created_listed_and_deleted_at_both_levels() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    h.instance("acme", "p", "j").await;

    // Project level: every event type by default, no instanceId.
    let r = h
        .call(
            "POST",
            "/projects/p/subscriptions",
            Some("acme"),
            Some(json!({"callbackUrl": "https://hooks.example.com/prices", "description": "all"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let project_level = r.body["subscriptionId"].as_str().unwrap().to_owned();
    assert_eq!(r.body["projectId"], "p");
    assert!(r.body.get("instanceId").is_none(), "{:?}", r.body);
    assert_eq!(r.body["callbackUrl"], "https://hooks.example.com/prices");
    assert_eq!(
        r.body["events"],
        json!(["prices.updated", "entries.rejected", "instance.deactivated"])
    );
    assert_eq!(r.body["description"], "all");
    assert_eq!(r.body["status"], "active");
    assert!(Timestamp::parse(r.body["createdAt"].as_str().unwrap()).is_some());

    // Instance level: its own events only.
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/subscriptions",
            Some("acme"),
            Some(json!({"callbackUrl": "https://hooks.example.com/i", "events": ["entries.rejected"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let instance_level = r.body["subscriptionId"].as_str().unwrap().to_owned();
    assert_eq!(r.body["instanceId"], "i");
    assert_eq!(r.body["events"], json!(["entries.rejected"]));
    assert_eq!(r.body["description"], "");

    // Each listing holds its own scope, with callback URLs.
    let r = h
        .call("GET", "/projects/p/subscriptions", Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["next"], Value::Null);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["items"][0]["subscriptionId"], project_level.as_str());
    assert_eq!(
        r.body["items"][0]["callbackUrl"],
        "https://hooks.example.com/prices"
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/subscriptions",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        r.body["items"][0]["subscriptionId"],
        instance_level.as_str()
    );
    assert_eq!(
        r.body["items"][0]["callbackUrl"],
        "https://hooks.example.com/i"
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instances/j/subscriptions",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body, json!({"items": [], "next": null}));

    // An instance that does not exist.
    for method in ["GET", "POST"] {
        let body = (method == "POST").then(|| hook("acme"));
        let r = h
            .call(
                method,
                "/projects/p/instances/ghost/subscriptions",
                Some("acme"),
                body,
            )
            .await;
        assert_problem(&r, StatusCode::NOT_FOUND);
    }
    let r = h
        .call("GET", "/projects/nope/subscriptions", Some("acme"), None)
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);

    // DELETE takes either level on the project path; a second time it is unknown.
    for id in [&instance_level, &project_level] {
        let path = format!("/projects/p/subscriptions/{id}");
        let r = h.call("DELETE", &path, Some("acme"), None).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
        assert_eq!(r.body, Value::Null);
        assert_problem(
            &h.call("DELETE", &path, Some("acme"), None).await,
            StatusCode::NOT_FOUND,
        );
    }
    assert_problem(
        &h.call(
            "DELETE",
            "/projects/p/subscriptions/unknown",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    let r = h
        .call("GET", "/projects/p/subscriptions", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"], json!([]));
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/subscriptions",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"], json!([]));

    // No token, no subscriptions.
    for (method, path) in [
        ("GET", "/projects/p/subscriptions"),
        ("POST", "/projects/p/subscriptions"),
        ("POST", "/projects/p/instances/i/subscriptions"),
        ("DELETE", "/projects/p/subscriptions/x"),
        ("POST", "/projects/p/subscriptions/x/trigger"),
        ("POST", "/projects/p/subscriptions/x/secret"),
        ("GET", "/projects/p/subscriptions/x/deliveries"),
    ] {
        let r = h.call(method, path, None, Some(hook("acme"))).await;
        assert_problem(&r, StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers["www-authenticate"], "Bearer");
    }
}

/// The signing secret is in the creation response and in a rotation's, never in a read or
/// a listing; the store keeps it, and a rotation keeps the replaced one signing for a day.
#[tokio::test]
async fn a_subscription_secret_is_shown_at_creation_and_rotation_only() {
    use pricing_core::ids::SubscriptionId;
    use pricing_core::ports::SubscriptionStore;
    use pricing_core::webhooks::WebhookSecret;

    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let mut created = Vec::new();
    for path in [
        "/projects/p/subscriptions",
        "/projects/p/instances/i/subscriptions",
    ] {
        let r = h.call("POST", path, Some("acme"), Some(hook("acme"))).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        // The secret is shown only here: no cache may keep it.
        assert_eq!(r.headers["cache-control"], "no-store");
        let secret = r.body["secret"].as_str().expect("a secret at creation");
        let parsed = WebhookSecret::parse(secret).expect("whsec_<base64>");
        assert!(secret.starts_with("whsec_"));
        let id = r.body["subscriptionId"].as_str().unwrap().to_owned();
        let stored = h
            .store
            .get_subscription(
                &acme(&ProjectId::parse("p").unwrap()),
                &SubscriptionId::parse(&id).unwrap(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.secrets.map(|s| s.current),
            Some(parsed),
            "the secret shown is the one stored"
        );
        created.push((id, secret.to_owned()));
    }
    assert_ne!(created[0].1, created[1].1, "each subscription has its own");

    let shown = |body: &Value, secret: &str| {
        let text = body.to_string();
        text.contains("\"secret\"") || text.contains(secret.trim_start_matches("whsec_"))
    };
    for path in [
        "/projects/p/subscriptions",
        "/projects/p/instances/i/subscriptions",
    ] {
        let r = h.call("GET", path, Some("acme"), None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
        for (_, secret) in &created {
            assert!(
                !shown(&r.body, secret),
                "a listing shows no secret: {}",
                r.body
            );
        }
    }

    // Rotation: a new secret, once; the old one signs on for 24 hours.
    let (id, old) = &created[0];
    let before = Timestamp::now();
    let path = format!("/projects/p/subscriptions/{id}/secret");
    let r = h.call("POST", &path, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.headers["cache-control"], "no-store");
    assert_eq!(r.body["subscriptionId"], id.as_str());
    let new = r.body["secret"].as_str().unwrap().to_owned();
    assert_ne!(&new, old);
    let until = Timestamp::parse(r.body["previousSecretExpiresAt"].as_str().unwrap()).unwrap();
    let day = 24 * 3600 * 1000;
    assert!(
        until.millis() >= before.millis() + day
            && until.millis() <= Timestamp::now().millis() + day
    );
    let stored = h
        .store
        .get_subscription(
            &acme(&ProjectId::parse("p").unwrap()),
            &SubscriptionId::parse(id).unwrap(),
        )
        .await
        .unwrap()
        .unwrap()
        .secrets
        .unwrap();
    assert_eq!(Some(stored.current), WebhookSecret::parse(&new));
    assert_eq!(stored.previous, WebhookSecret::parse(old));
    // It takes no body: a field, or a body that is not `{}`, is a 400 and rotates nothing
    // (a second rotation drops the oldest secret at once).
    for body in [json!({"x": 1}), json!([]), json!("rotate")] {
        let r = h
            .call("POST", &path, Some("acme"), Some(body.clone()))
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        let trigger = format!("/projects/p/subscriptions/{id}/trigger");
        let r = h.call("POST", &trigger, Some("acme"), Some(body)).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }
    let unchanged = h
        .store
        .get_subscription(
            &acme(&ProjectId::parse("p").unwrap()),
            &SubscriptionId::parse(id).unwrap(),
        )
        .await
        .unwrap()
        .unwrap()
        .secrets
        .unwrap();
    assert_eq!(Some(unchanged.current), WebhookSecret::parse(&new));
    let r = h
        .call("GET", "/projects/p/subscriptions", Some("acme"), None)
        .await;
    assert!(!shown(&r.body, &new), "{}", r.body);
    let r = h
        .call(
            "GET",
            &format!("/projects/p/subscriptions/{id}/deliveries"),
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!shown(&r.body, &new));

    // Another tenant cannot rotate it; an unknown subscription is 404.
    h.project("intruder", "q").await;
    for (tenant, path) in [
        ("intruder", path.clone()),
        ("intruder", format!("/projects/q/subscriptions/{id}/secret")),
        (
            "acme",
            "/projects/p/subscriptions/unknown/secret".to_owned(),
        ),
    ] {
        assert_problem(
            &h.call("POST", &path, Some(tenant), None).await,
            StatusCode::NOT_FOUND,
        );
    }
    let still = h
        .store
        .get_subscription(
            &acme(&ProjectId::parse("p").unwrap()),
            &SubscriptionId::parse(id).unwrap(),
        )
        .await
        .unwrap()
        .unwrap()
        .secrets
        .unwrap();
    assert_eq!(Some(still.current), WebhookSecret::parse(&new), "unchanged");
}

#[tokio::test]
async fn subscription_requests_are_validated_with_pointers() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    for path in [
        "/projects/p/subscriptions",
        "/projects/p/instances/i/subscriptions",
    ] {
        let r = h
            .call(
                "POST",
                path,
                Some("acme"),
                Some(
                    json!({"callbackUrl": "http://10.0.0.1/", "events": ["prices.updated", "nope"],
                            "description": 5, "extra": true}),
                ),
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        let pointers: Vec<&str> = r.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert_eq!(
            pointers,
            ["/extra", "/callbackUrl", "/events/1", "/description"],
            "{:?}",
            r.body
        );
        assert_eq!(r.body["errors"][0]["code"], "unknownField");
        assert!(r.body["errors"][1]["message"].is_string());

        let r = h.call("POST", path, Some("acme"), Some(json!({}))).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], "/callbackUrl");
        assert_eq!(r.body["errors"][0]["code"], "required");

        let r = h.call("POST", path, Some("acme"), None).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], "");

        let r = h
            .call(
                "POST",
                path,
                Some("acme"),
                Some(json!({"callbackUrl": "https://h.example.com", "events": []})),
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], "/events");

        let r = h
            .call(
                "POST",
                path,
                Some("acme"),
                Some(json!({"callbackUrl": "https://h.example.com", "description": "d".repeat(1001)})),
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], "/description");
    }

    // The default policy is strict: https to public hosts only.
    for url in [
        "http://hooks.example.com/x",
        "https://localhost/x",
        "https://127.0.0.1/x",
        "https://169.254.169.254/latest",
        "ftp://hooks.example.com/x",
        "not a url",
    ] {
        let r = h
            .call(
                "POST",
                "/projects/p/subscriptions",
                Some("acme"),
                Some(json!({"callbackUrl": url})),
            )
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], "/callbackUrl", "{url}");
    }

    // Not JSON.
    let req = Request::builder()
        .method("POST")
        .uri("/projects/p/subscriptions")
        .header("authorization", format!("Bearer {}", h.token("acme")))
        .header("content-type", "text/plain")
        .body(Body::from("https://hooks.example.com"))
        .unwrap();
    assert_problem(&h.raw(req).await, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let r = h
        .call("GET", "/projects/p/subscriptions", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"], json!([]), "nothing invalid was stored");
}

#[tokio::test]
async fn a_local_callback_policy_allows_http_and_private_addresses() {
    let h = harness_with(|app| app.with_callback_policy(CallbackPolicy::LOCAL));
    h.project("acme", "p").await;
    for url in ["http://127.0.0.1:8080/hook", "http://receiver/hook"] {
        let r = h
            .call(
                "POST",
                "/projects/p/subscriptions",
                Some("acme"),
                Some(json!({"callbackUrl": url})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{url}: {:?}", r.body);
        assert_eq!(r.body["callbackUrl"], url);
    }
    let r = h
        .call(
            "POST",
            "/projects/p/subscriptions",
            Some("acme"),
            Some(json!({"callbackUrl": "ftp://receiver/hook"})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_21st_subscription_of_a_scope_is_a_422_naming_the_limit() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    for scope in [
        "/projects/p/subscriptions",
        "/projects/p/instances/i/subscriptions",
    ] {
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.push(h.subscription("acme", scope).await);
        }
        let r = h
            .call("POST", scope, Some("acme"), Some(hook("acme")))
            .await;
        assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap()
                .contains("20 subscriptions"),
            "{:?}",
            r.body
        );
        let r = h.call("GET", scope, Some("acme"), None).await;
        assert_eq!(r.body["items"].as_array().unwrap().len(), 20);
        assert_eq!(r.body["next"], Value::Null);
        // Paged as every listing (an outside probe found `limit` and `cursor` ignored):
        // pages of 7 go through all 20 once, in id order (ULIDs: creation order to the
        // millisecond).
        let mut seen = Vec::new();
        let mut url = format!("{scope}?limit=7");
        loop {
            let r = h.call("GET", &url, Some("acme"), None).await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            let page = r.body["items"].as_array().unwrap();
            assert!(page.len() <= 7);
            seen.extend(
                page.iter()
                    .map(|s| s["subscriptionId"].as_str().unwrap().to_owned()),
            );
            match r.body["next"].as_str() {
                Some(next) => url = format!("{scope}?limit=7&cursor={next}"),
                None => break,
            }
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(seen, sorted);
        for bad in [
            "?limit=0",
            "?limit=1001",
            "?limit=2&limit=3",
            "?cursor=a&cursor=b",
        ] {
            let r = h
                .call("GET", &format!("{scope}{bad}"), Some("acme"), None)
                .await;
            assert_problem(&r, StatusCode::BAD_REQUEST);
        }
        // Deleting one makes room again.
        let r = h
            .call(
                "DELETE",
                &format!("/projects/p/subscriptions/{}", ids[3]),
                Some("acme"),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        h.subscription("acme", scope).await;
    }
    // Each instance has its own allowance.
    h.instance("acme", "p", "j").await;
    h.subscription("acme", "/projects/p/instances/j/subscriptions")
        .await;
}

#[tokio::test]
async fn a_trigger_enqueues_a_trigger_message_and_refuses_disabled_subscriptions() {
    use pricing_core::ports::SubscriptionStore;
    use pricing_core::webhooks::SubscriptionStatus;
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let subscription = h
        .subscription("acme", "/projects/p/instances/i/subscriptions")
        .await;
    h.drain().await;

    let path = format!("/projects/p/subscriptions/{subscription}/trigger");
    let r = h.call("POST", &path, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body["subscriptionId"], subscription.as_str());
    let trigger_id = r.body["triggerId"].as_str().unwrap().to_owned();
    assert!(trigger_id.starts_with("trg_"), "{trigger_id}");
    assert_eq!(
        h.drain().await,
        vec![Message::Trigger {
            project: acme(&ProjectId::parse("p").unwrap()),
            subscription_id: pricing_core::ids::SubscriptionId::parse(subscription.as_str())
                .unwrap(),
            trigger_id: trigger_id.clone(),
            instance_id: None,
            cursor: None,
        }]
    );
    // Every trigger is its own resend.
    let r = h.call("POST", &path, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_ne!(r.body["triggerId"], trigger_id.as_str());
    assert_eq!(h.drain().await.len(), 1);

    assert_problem(
        &h.call(
            "POST",
            "/projects/p/subscriptions/unknown/trigger",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
    );

    // A subscription the receiver disabled (410) is not triggered.
    h.store
        .set_subscription_status(
            &acme(&ProjectId::parse("p").unwrap()),
            &pricing_core::ids::SubscriptionId::parse(subscription.as_str()).unwrap(),
            SubscriptionStatus::Disabled,
            Timestamp::now(),
            Some("the receiver answered 410 Gone"),
        )
        .await
        .unwrap();
    let r = h.call("POST", &path, Some("acme"), None).await;
    assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.body["detail"].as_str().unwrap().contains("disabled"),
        "{:?}",
        r.body
    );
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/subscriptions",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"][0]["status"], "disabled");
    assert!(h.drain().await.is_empty(), "nothing was enqueued");
}

#[tokio::test]
async fn deliveries_are_listed_newest_first_and_paged() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
    let other = h.subscription("acme", "/projects/p/subscriptions").await;
    let ids = stored_deliveries(&h, "p", &subscription, 3).await;
    stored_deliveries(&h, "p", &other, 1).await;

    let path = format!("/projects/p/subscriptions/{subscription}/deliveries");
    let r = h.call("GET", &path, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let listed: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["deliveryId"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [&ids[2], &ids[1], &ids[0]],
        "newest first, this subscription's only"
    );
    assert_eq!(r.body["next"], Value::Null);
    let first = &r.body["items"][0];
    assert_eq!(first["webhookId"], first["deliveryId"]);
    assert_eq!(first["subscriptionId"], subscription.as_str());
    assert_eq!(first["instanceId"], "i");
    assert_eq!(first["eventType"], "prices.updated");
    assert_eq!(first["status"], "pending");
    assert_eq!(first["attempt"], 0);
    assert_eq!(first["attempts"], json!([]));
    assert_eq!(first["clientReports"], json!([]));
    assert!(
        first.get("event").is_none(),
        "the event itself is not listed"
    );

    // Paging.
    let r = h
        .call("GET", &format!("{path}?limit=2"), Some("acme"), None)
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let next = r.body["next"].as_str().expect("a next cursor").to_owned();
    let r = h
        .call(
            "GET",
            &format!("{path}?limit=2&cursor={next}"),
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["items"][0]["deliveryId"], ids[0].as_str());
    assert_eq!(r.body["next"], Value::Null);
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=not-ours"] {
        let r = h
            .call("GET", &format!("{path}?{bad}"), Some("acme"), None)
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
    }

    // An unknown subscription has no log, and a deleted one neither.
    assert_problem(
        &h.call(
            "GET",
            "/projects/p/subscriptions/unknown/deliveries",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    h.call(
        "DELETE",
        &format!("/projects/p/subscriptions/{subscription}"),
        Some("acme"),
        None,
    )
    .await;
    assert_problem(
        &h.call("GET", &path, Some("acme"), None).await,
        StatusCode::NOT_FOUND,
    );
}

#[tokio::test]
async fn webhook_error_reports_are_validated_kept_and_tenant_isolated() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
    let webhook = stored_deliveries(&h, "p", &subscription, 1).await.remove(0);
    let report = json!({"webhookId": webhook, "message": "price import failed", "status": 500});

    let r = h
        .call("POST", "/webhooks/errors", None, Some(report.clone()))
        .await;
    assert_problem(&r, StatusCode::UNAUTHORIZED);

    // Invalid reports: every problem with its pointer.
    let r = h
        .call(
            "POST",
            "/webhooks/errors",
            Some("acme"),
            Some(json!({"message": "", "status": 99, "extra": 1})),
        )
        .await;
    assert_problem(&r, StatusCode::BAD_REQUEST);
    let errors: Vec<(&str, &str)> = r.body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["pointer"].as_str().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        errors,
        [
            ("/extra", "unknownField"),
            ("/webhookId", "required"),
            ("/message", "range"),
            ("/status", "range"),
        ]
    );
    for (body, pointer, code) in [
        (
            json!({"webhookId": 5, "message": "x"}),
            "/webhookId",
            "type",
        ),
        (
            json!({"webhookId": "", "message": "x"}),
            "/webhookId",
            "range",
        ),
        (
            json!({"webhookId": webhook, "message": "x".repeat(1001)}),
            "/message",
            "tooLarge",
        ),
        (
            json!({"webhookId": webhook, "message": "x", "status": 600}),
            "/status",
            "range",
        ),
        (
            json!({"webhookId": webhook, "message": "x", "status": 404.5}),
            "/status",
            "range",
        ),
        (
            json!({"webhookId": webhook, "message": "x", "status": "500"}),
            "/status",
            "type",
        ),
        (json!([report.clone()]), "", "type"),
    ] {
        let r = h
            .call("POST", "/webhooks/errors", Some("acme"), Some(body))
            .await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert_eq!(r.body["errors"][0]["pointer"], pointer, "{:?}", r.body);
        assert_eq!(r.body["errors"][0]["code"], code, "{:?}", r.body);
    }
    let r = h.call("POST", "/webhooks/errors", Some("acme"), None).await;
    assert_problem(&r, StatusCode::BAD_REQUEST);

    // Unknown, and another tenant's: the same 404, nothing stored.
    let r = h
        .call(
            "POST",
            "/webhooks/errors",
            Some("acme"),
            Some(json!({"webhookId": "wh_unknown", "message": "x"})),
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);
    let r = h
        .call(
            "POST",
            "/webhooks/errors",
            Some("intruder"),
            Some(report.clone()),
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND);
    let deliveries = format!("/projects/p/subscriptions/{subscription}/deliveries");
    let r = h.call("GET", &deliveries, Some("acme"), None).await;
    assert_eq!(r.body["items"][0]["clientReports"], json!([]));

    // The owner's report is accepted and shown with the delivery; a message of exactly
    // the longest length passes.
    let r = h
        .call("POST", "/webhooks/errors", Some("acme"), Some(report))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body, json!({"webhookId": webhook, "accepted": true}));
    let long = "é".repeat(1000);
    let r = h
        .call(
            "POST",
            "/webhooks/errors",
            Some("acme"),
            Some(json!({"webhookId": webhook, "message": long})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let r = h.call("GET", &deliveries, Some("acme"), None).await;
    let reports = r.body["items"][0]["clientReports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["message"], "price import failed");
    assert_eq!(reports[0]["status"], 500);
    assert!(Timestamp::parse(reports[0]["reportedAt"].as_str().unwrap()).is_some());
    assert_eq!(reports[1]["message"], long.as_str());
    assert!(reports[1].get("status").is_none());
}

// ---------------------------------------------------------------- bounded pages (issue 9)

/// The most bytes of one listing page's body: 1 MiB of records plus the envelope.
const PAGE_BODY_BYTES: usize = 1024 * 1024 + 1024;

/// Follows `next` from `first` (a path with `?`, maybe with a cursor of its own, which the
/// next pages replace: a parameter is given once) through every page, checking each one's
/// size; returns the records in order and the number of pages.
async fn every_page(h: &Harness, first: &str, cursor_param: &str) -> (Vec<Value>, usize) {
    let mut records = Vec::new();
    let mut pages = 0;
    let (route, query) = first.split_once('?').expect("a path with ?");
    let given = format!("{cursor_param}=");
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with(&given))
        .collect();
    let rest = format!("{route}?{}", kept.join("&"));
    let mut path = first.to_owned();
    loop {
        let r = h.call("GET", &path, Some("acme"), None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {:?}", r.body);
        assert!(
            r.len <= PAGE_BODY_BYTES,
            "{path}: a page of {} bytes",
            r.len
        );
        let items = r.body["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{path}: every page progresses");
        records.extend(items.iter().cloned());
        pages += 1;
        match r.body["next"].as_str() {
            Some(next) => path = format!("{rest}&{cursor_param}={next}"),
            None => return (records, pages),
        }
    }
}

#[tokio::test]
async fn a_log_page_of_large_entries_stays_under_1_mib_and_pages_completely() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    // 100 entries near the 64 KiB entry limit: ~88 KB each once signed (8.8 MB in all).
    let note = "n".repeat(60 * 1024);
    for batch in 0..4 {
        let entries: Vec<Value> = (0..25)
            .map(|k| {
                json!({"type": "instanceMetadata", "transactionId": format!("big-{batch}-{k}"),
                       "data": {"patch": [{"op": "add", "path": "/note", "value": note}]}})
            })
            .collect();
        let r = h
            .call(
                "POST",
                "/projects/p/instances/i/entries",
                Some("acme"),
                Some(json!({ "entries": entries })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/entries?limit=100",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.len <= PAGE_BODY_BYTES, "a page of {} bytes", r.len);
    let items = r.body["items"].as_array().expect("items");
    assert!(
        (5..100).contains(&items.len()),
        "the page stops early: {} entries",
        items.len()
    );
    let last = items.last().expect("an entry")["sequence"].as_u64();
    assert_eq!(
        r.body["next"].as_str().and_then(|n| n.parse().ok()),
        last,
        "next is the page's last sequence"
    );
    // Paging on from `next` (as `after`, and as `cursor`) lists every entry once, in order.
    for param in ["after", "cursor"] {
        let (records, pages) =
            every_page(&h, "/projects/p/instances/i/entries?limit=100", param).await;
        let sequences: Vec<u64> = records
            .iter()
            .map(|e| e["sequence"].as_u64().expect("sequence"))
            .collect();
        assert_eq!(sequences, (1..=100).collect::<Vec<u64>>());
        assert!(pages >= 9, "{pages} pages");
    }
    // Small entries still fill a page by count.
    h.instance("acme", "p", "small").await;
    let entries: Vec<Value> = (0..150)
        .map(|k| json!({"type": "itemQuantity", "data": {"itemId": format!("x{k}"), "total": 1}}))
        .collect();
    let r = h
        .call(
            "POST",
            "/projects/p/instances/small/entries",
            Some("acme"),
            Some(json!({ "entries": entries })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/small/entries?limit=120",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.body["items"].as_array().expect("items").len(), 120);
    assert_eq!(r.body["next"], "120");
}

/// An item id of 120 characters ending in `k` (zero-padded so that id order is `k` order).
fn long_item_id(k: usize) -> String {
    format!("{}-{k:06}", "i".repeat(113))
}

/// An instance `id` of `n` items with long ids in products `a` (even `k`) and `b` (odd),
/// processed; each item has sold 1.
async fn large_instance(h: &Harness, id: &str, n: usize) {
    h.instance("acme", "p", id).await;
    let path = format!("/projects/p/instances/{id}/entries");
    let products = json!({"entries": [
        {"type": "productRegistration", "data": {"productId": "a", "capacity": 100000, "pricingModel": "fixed"}},
        {"type": "productRegistration", "data": {"productId": "b", "capacity": 100000, "pricingModel": "fixed"}},
    ]});
    let r = h.call("POST", &path, Some("acme"), Some(products)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(500) {
        let mut entries = Vec::new();
        for &k in chunk {
            let product = if k % 2 == 0 { "a" } else { "b" };
            entries.push(json!({"type": "itemRegistration", "data": {
                "itemId": long_item_id(k), "productId": product,
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}}));
            entries.push(
                json!({"type": "itemSale", "data": {"itemId": long_item_id(k), "price": 40}}),
            );
        }
        let r = h
            .call(
                "POST",
                &path,
                Some("acme"),
                Some(json!({ "entries": entries })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    h.process("p", id).await;
}

#[tokio::test]
async fn a_large_instance_pages_its_item_summaries_and_prices() {
    use pricing_core::ports::InstanceStore;
    use pricing_core::recalc::{RecalcRequest, recalculate};
    const N: usize = 8_000;
    let h = harness();
    h.project("acme", "p").await;
    large_instance(&h, "big", N).await;
    let all_ids: Vec<String> = (0..N).map(long_item_id).collect();

    // Details: the first 1,000 summaries inline with a cursor for the rest (the whole
    // list is ~1.8 MB); both products fit.
    let r = h
        .call("GET", "/projects/p/instances/big", Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.len <= 600 * 1024, "details of {} bytes", r.len);
    let items = r.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1000);
    assert_eq!(items[0]["itemId"], all_ids[0].as_str());
    assert_eq!(
        items[0],
        json!({"itemId": all_ids[0], "productId": "a", "dynamicPricing": true,
               "sold": 1, "reserved": 0, "available": 100_000 - N / 2, "oversold": 0}),
        "a summary as before"
    );
    assert_eq!(r.body["itemsNext"], all_ids[999].as_str());
    assert_eq!(r.body["products"].as_array().expect("products").len(), 2);
    assert_eq!(r.body["products"][0]["sold"], N as u64 / 2);
    assert_eq!(r.body["productsNext"], Value::Null);

    // The items listing continues from `itemsNext` to the end: every item once, in order.
    let first = format!(
        "/projects/p/instances/big/items?limit=1000&cursor={}",
        all_ids[999]
    );
    let mut listed: Vec<Value> = items.clone();
    let (rest, _) = every_page(&h, &first, "cursor").await;
    listed.extend(rest);
    let listed_ids: Vec<&str> = listed
        .iter()
        .map(|i| i["itemId"].as_str().expect("id"))
        .collect();
    assert_eq!(listed_ids, all_ids, "details + listing = every item once");
    assert!(listed.iter().all(|i| i["sold"] == 1));
    // From the start, by default pages of 100.
    let r = h
        .call("GET", "/projects/p/instances/big/items", Some("acme"), None)
        .await;
    assert_eq!(r.body["items"].as_array().expect("items").len(), 100);
    assert_eq!(r.body["next"], all_ids[99].as_str());

    // One product's items: its details inline the first 1,000 ids, the listing the rest.
    let r = h
        .call(
            "GET",
            "/projects/p/instances/big/products/b",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().expect("items").len(), 1000);
    let cursor = r.body["itemsNext"].as_str().expect("itemsNext").to_owned();
    assert_eq!(cursor, long_item_id(1999));
    let (rest, _) = every_page(
        &h,
        &format!("/projects/p/instances/big/items?productId=b&limit=1000&cursor={cursor}"),
        "cursor",
    )
    .await;
    assert_eq!(rest.len(), N / 2 - 1000);
    assert!(rest.iter().all(|i| i["productId"] == "b"));
    assert_problem(
        &h.call(
            "GET",
            "/projects/p/instances/big/items?productId=nope",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    // An empty productId filters nothing (it was a 404 for a product named "").
    let r = h
        .call(
            "GET",
            "/projects/p/instances/big/items?productId=&limit=3",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().expect("items").len(), 3);
    assert_problem(
        &h.call(
            "GET",
            "/projects/p/instances/big/items?cursor=no%2Fid",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    let (products, _) =
        every_page(&h, "/projects/p/instances/big/products?limit=1", "cursor").await;
    assert_eq!(products.len(), 2);

    // Prices: 8,000 prices (~1.2 MB) do not fit one page of instancePrices.
    let key = InstanceKey::new(
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("p").expect("id"),
        InstanceId::parse("big").expect("id"),
    );
    let instance = h
        .store
        .get_instance(&key)
        .await
        .expect("read")
        .expect("instance");
    let request = RecalcRequest {
        calculation_id: "calc_big".into(),
        trigger: pricing_core::pricing::Trigger::Request,
        metadata: None,
    };
    recalculate(
        &h.store,
        &h.store,
        &h.store,
        &instance,
        &request,
        Timestamp::now(),
    )
    .await
    .expect("recalculate")
    .expect("calculated");
    h.instance("acme", "p", "small").await;
    for first in [
        "/projects/p/instancePrices?limit=1000",
        "/projects/p/instancePrices?instanceId=small&instanceId=big&instanceId=small",
    ] {
        let (parts, pages) = every_page(&h, first, "cursor").await;
        assert!(pages >= 2, "{first}: {pages} pages");
        let mut prices: Vec<String> = Vec::new();
        for part in parts.iter().filter(|p| p["instanceId"] == "big") {
            assert_eq!(part["calculationId"], "calc_big");
            prices.extend(
                part["prices"]
                    .as_array()
                    .expect("prices")
                    .iter()
                    .map(|p| p["itemId"].as_str().expect("id").to_owned()),
            );
        }
        assert_eq!(prices, all_ids, "{first}: every price once, in order");
        // An instance asked for twice is listed once.
        let small = parts.iter().filter(|p| p["instanceId"] == "small").count();
        assert_eq!(small, 1, "{first}");
    }
    assert_problem(
        &h.call(
            "GET",
            "/projects/p/instancePrices?instanceId=big&cursor=@bm9wZQ",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
}

#[tokio::test]
async fn a_delivery_page_stays_under_1_mib() {
    use pricing_core::ports::DeliveryStore;
    use pricing_core::webhooks::ClientReport;
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
    // 60 deliveries with 20 reports of 1,000 characters each: ~21 KB per delivery.
    let ids = stored_deliveries(&h, "p", &subscription, 60).await;
    for id in &ids {
        for k in 0..20 {
            let report = ClientReport {
                message: format!("{k:04}{}", "r".repeat(996)),
                status: Some(500),
                reported_at: Timestamp::now(),
            };
            h.store
                .add_client_report(id, &report)
                .await
                .expect("report");
        }
    }
    let first = format!("/projects/p/subscriptions/{subscription}/deliveries?limit=100");
    let r = h.call("GET", &first, Some("acme"), None).await;
    let page = r.body["items"].as_array().expect("items").len();
    assert!((10..60).contains(&page), "the page stops early: {page}");
    let (all, _) = every_page(&h, &first, "cursor").await;
    let mut listed: Vec<&str> = all
        .iter()
        .map(|d| d["webhookId"].as_str().expect("id"))
        .collect();
    listed.reverse();
    assert_eq!(listed, ids, "every delivery once, newest first");
}

#[tokio::test]
async fn an_instances_events_are_read_filtered_and_paged() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    // Two rejections in two processing runs, and a valid entry between them.
    for (n, tx) in ["lost-1", "lost-2"].iter().enumerate() {
        let body = json!({"entries": [
            {"type": "itemSale", "transactionId": tx, "data": {"itemId": "ghost", "price": 10}},
            {"type": "productRegistration", "transactionId": format!("ok-{n}"),
             "data": {"productId": format!("ga{n}"), "capacity": 5}},
        ]});
        let r = h
            .call(
                "POST",
                "/projects/p/instances/i/entries",
                Some("acme"),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        h.process("p", "i").await;
    }
    let h = &h;
    let get = |query: &str| {
        let path = format!("/projects/p/instances/i/events{query}");
        async move { h.call("GET", &path, Some("acme"), None).await }
    };
    let r = get("?type=entries.rejected").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{:?}", r.body);
    assert_eq!(r.body["next"], Value::Null);
    let first = &items[0];
    assert_eq!(first["type"], "entries.rejected");
    assert_eq!(first["projectId"], "p");
    assert_eq!(first["instanceId"], "i");
    let error = &first["data"]["errors"][0];
    assert_eq!(error["transactionId"], "lost-1");
    assert_eq!(error["code"], "unknownItem");
    assert_eq!(error["pointer"], "/data/itemId");
    assert!(error["message"].is_string(), "{error}");
    assert_eq!(items[1]["data"]["errors"][0]["transactionId"], "lost-2");

    // Pages of one: the cursor (a `next`, or any event id of the instance) goes on.
    let r = get("?type=entries.rejected&limit=1").await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    let next = r.body["next"].as_str().unwrap().to_owned();
    let r = get(&format!("?type=entries.rejected&limit=1&cursor={next}")).await;
    assert_eq!(
        r.body["items"][0]["data"]["errors"][0]["transactionId"],
        "lost-2"
    );
    let id = first["id"].as_str().unwrap();
    let r = get(&format!("?cursor={id}")).await;
    assert_eq!(
        r.body["items"][0]["data"]["errors"][0]["transactionId"],
        "lost-2"
    );
    // A webhook's envelope id stands for its event (found by an outside review: the
    // documented way to resume was refused).
    {
        use pricing_core::ports::{DeliveryStore, EventStore, SubscriptionStore};
        let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
        let project = ProjectId::parse("p").expect("id");
        let sub = h
            .store
            .get_subscription(
                &acme(&project),
                &pricing_core::ids::SubscriptionId::parse(&subscription).expect("id"),
            )
            .await
            .expect("read")
            .expect("subscription");
        let key = InstanceKey::new(
            pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
            project,
            InstanceId::parse("i").expect("id"),
        );
        let events = h.store.list_events(&key, None, 10).await.expect("events");
        let event = events.iter().find(|e| e.id == id).expect("the first event");
        let delivery = pricing_core::webhooks::Delivery::new(event, &sub, Timestamp::now());
        h.store
            .create_deliveries(std::slice::from_ref(&delivery))
            .await
            .expect("stored");
        let r = get(&format!("?cursor={}", delivery.webhook_id)).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        assert_eq!(
            r.body["items"][0]["data"]["errors"][0]["transactionId"],
            "lost-2"
        );
        assert_problem(
            &get("?cursor=wh_0123456789abcdef").await,
            StatusCode::BAD_REQUEST,
        );
        // A manual trigger's resend is a copy under ids of its own: a 400 that says so.
        let resent = pricing_core::model::Event {
            id: pricing_core::webhooks::trigger::resent_event_id("trg_1", event),
            ..event.clone()
        };
        let delivery = pricing_core::webhooks::Delivery::new(&resent, &sub, Timestamp::now());
        h.store
            .create_deliveries(std::slice::from_ref(&delivery))
            .await
            .expect("stored");
        let r = get(&format!("?cursor={}", delivery.webhook_id)).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        assert!(
            r.body["detail"].as_str().unwrap().contains("resend"),
            "{:?}",
            r.body
        );
    }

    // Time filters: nothing was created before 2000 or after 2999.
    let r = get("?until=2000-01-01T00:00:00Z").await;
    assert_eq!(r.body["items"], json!([]));
    let r = get("?since=2999-01-01T00:00:00Z").await;
    assert_eq!(r.body["items"], json!([]));
    let r = get("?type=instance.deactivated").await;
    assert_eq!(r.body["items"], json!([]));

    // Bad queries are 400s; other tenants and unknown instances 404.
    for bad in [
        "?type=entries.lost",
        "?since=yesterday",
        "?until=2026-13-01T00:00:00Z",
        "?cursor=evt_unknown",
        "?limit=0",
        "?limit=x",
    ] {
        assert_problem(&get(bad).await, StatusCode::BAD_REQUEST);
    }
    let long = "x".repeat(300);
    assert_problem(
        &get(&format!("?cursor={long}")).await,
        StatusCode::BAD_REQUEST,
    );
    h.project("other", "p").await;
    h.instance("other", "p", "i").await;
    let r = h
        .call("GET", "/projects/p/instances/i/events", Some("other"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body["items"],
        json!([]),
        "another tenant's p/i is its own"
    );
    assert_problem(
        &h.call(
            "GET",
            "/projects/p/instances/nope/events",
            Some("acme"),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    assert_problem(
        &h.call("GET", "/projects/p/instances/i/events", None, None)
            .await,
        StatusCode::UNAUTHORIZED,
    );
}

#[tokio::test]
async fn every_answer_carries_a_request_id_the_callers_own_when_plain() {
    let h = harness();
    let id_of = |r: &Reply| {
        r.headers
            .get("x-request-id")
            .expect("x-request-id")
            .to_str()
            .unwrap()
            .to_owned()
    };
    // Made up when absent: a ULID, another one per request; on errors too.
    let a = id_of(&h.call("GET", "/health", None, None).await);
    let b = id_of(&h.call("GET", "/projects", None, None).await);
    assert_eq!(a.len(), 26, "{a}");
    assert_ne!(a, b);
    let with = |id: &str| {
        Request::builder()
            .uri("/projects/nope")
            .header("authorization", format!("Bearer {}", h.token("acme")))
            .header("x-request-id", id)
            .body(Body::empty())
            .unwrap()
    };
    let r = h.raw(with("order-4711:retry.2")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        id_of(&r),
        "order-4711:retry.2",
        "the caller's own id is kept"
    );
    // One that could forge a log line or is too long is replaced.
    for bad in ["two words", &"x".repeat(129)] {
        let r = h.raw(with(bad)).await;
        let id = id_of(&r);
        assert_ne!(id, bad);
        assert_eq!(id.len(), 26, "{id}");
    }
}

#[tokio::test]
async fn the_openapi_document_is_served_gzip_to_who_accepts_it_and_plain_otherwise() {
    let h = harness();
    let plain = h.call("GET", "/openapi.json", None, None).await;
    assert_eq!(plain.status, StatusCode::OK);
    assert!(plain.headers.get("content-encoding").is_none());
    let doc: Value = serde_json::from_str(pricing_api::system::OPENAPI).unwrap();
    assert_eq!(plain.body, doc);
    let response = h
        .router
        .clone()
        .oneshot(
            Request::get("/openapi.json")
                .header("accept-encoding", "gzip")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.headers()["content-encoding"], "gzip");
    assert_eq!(response.headers()["vary"], "accept-encoding");
    let gz = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        gz.len() * 4 < pricing_api::system::OPENAPI.len(),
        "{}",
        gz.len()
    );
    let inflated = pricing_api::gzip::inflate(&gz);
    assert_eq!(inflated, pricing_api::system::OPENAPI.as_bytes());
}

/// A single-valued query parameter given twice is a 400 naming it, and so are two names of
/// one parameter (`after` and `cursor` of the log) given together, on GET and HEAD alike;
/// a repeatable parameter (`instanceId` of instancePrices) still repeats. (Until
/// 2026-11-29 the last value won, the first for `productId`, and the others were ignored.)
#[tokio::test]
async fn a_single_valued_query_parameter_given_twice_is_a_400_naming_it() {
    let h = harness();
    h.project("acme", "p").await;
    h.instance("acme", "p", "i").await;
    h.instance("acme", "p", "j").await;
    let r = h
        .call(
            "POST",
            "/projects/p/instances/i/entries",
            Some("acme"),
            Some(registrations()),
        )
        .await;
    assert_eq!(r.body["accepted"], 3, "{:?}", r.body);
    h.process("p", "i").await;
    let subscription = h.subscription("acme", "/projects/p/subscriptions").await;
    let entries = "/projects/p/instances/i/entries";
    let items = "/projects/p/instances/i/items";

    // Once each, the values are taken.
    let r = h
        .call("GET", &format!("{entries}?limit=1"), Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(1));
    let r = h
        .call("GET", &format!("{entries}?cursor=1"), Some("acme"), None)
        .await;
    assert_eq!(r.body["items"][0]["sequence"], 2, "{:?}", r.body);
    let r = h
        .call("GET", &format!("{items}?productId=ga"), Some("acme"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    // Given twice (or under both names): 400 naming the parameter(s), whatever the order.
    let refused = [
        (format!("{entries}?limit=3&limit=1"), vec!["limit"]),
        (format!("{entries}?after=1&after=2"), vec!["after"]),
        (
            format!("{entries}?after=1&cursor=3"),
            vec!["after", "cursor"],
        ),
        (
            format!("{entries}?cursor=3&after=1"),
            vec!["after", "cursor"],
        ),
        (
            format!("{items}?productId=ga&productId=NOPE"),
            vec!["productId"],
        ),
        (
            format!("{items}?productId=NOPE&productId=ga"),
            vec!["productId"],
        ),
        (format!("{items}?limit=1&limit=2"), vec!["limit"]),
        ("/projects?limit=1&limit=2".to_owned(), vec!["limit"]),
        ("/projects?cursor=a&cursor=".to_owned(), vec!["cursor"]),
        (
            "/projects/p/instances?limit=1&limit=1".to_owned(),
            vec!["limit"],
        ),
        (
            "/projects/p/instances/i/products?cursor=a&cursor=b".to_owned(),
            vec!["cursor"],
        ),
        (
            "/projects/p/instances/i/items/ga-1/priceHistory?limit=1&limit=2".to_owned(),
            vec!["limit"],
        ),
        (
            "/projects/p/instancePrices?instanceId=i&limit=1&limit=2".to_owned(),
            vec!["limit"],
        ),
        (
            format!("/projects/p/subscriptions/{subscription}/deliveries?limit=1&limit=2"),
            vec!["limit"],
        ),
        (
            "/projects/p/instances/i/events?since=2026-01-01T00:00:00Z&since=2027-01-01T00:00:00Z"
                .to_owned(),
            vec!["since"],
        ),
        (
            "/projects/p/instances/i/events?until=2027-01-01T00:00:00Z&until=2027-01-01T00:00:00Z"
                .to_owned(),
            vec!["until"],
        ),
        (
            "/projects/p/instances/i/events?limit=5&limit=5".to_owned(),
            vec!["limit"],
        ),
    ];
    for (url, names) in &refused {
        let r = h.call("GET", url, Some("acme"), None).await;
        assert_problem(&r, StatusCode::BAD_REQUEST);
        let detail = r.body["detail"].as_str().unwrap_or_default();
        for name in names {
            assert!(detail.contains(name), "{url}: {detail}");
        }
        let r = h.call("HEAD", url, Some("acme"), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "HEAD {url}");
    }

    // Repeatable parameters repeat: instancePrices lists each instance asked for.
    let url = "/projects/p/instancePrices?instanceId=i&instanceId=j";
    let r = h.call("GET", url, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let listed: Vec<&str> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|p| p["instanceId"].as_str())
        .collect();
    assert_eq!(listed, ["i", "j"]);
    let r = h.call("HEAD", url, Some("acme"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h
        .call(
            "GET",
            "/projects/p/instances/i/events?type=entries.rejected&type=prices.updated",
            Some("acme"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}
