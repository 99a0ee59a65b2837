//! End-to-end: signed webhooks from the real `standalone` binary to real HTTP receivers
//! (one in this test, and the Python example in infra/webhook-receiver). Semantic
//! rejections arrive as `entries.rejected` with their transaction id, calculatePrices as
//! `prices.updated` with its metadata; signatures verify with the published keys and fail
//! on a tampered body; a receiver that fails once gets the second attempt with the same
//! webhook-id; a 410 disables the subscription; a manual trigger resends the latest
//! prices; a client's error report shows in the delivery log. Every delivery also carries
//! the Standard Webhooks signature under its subscription's own secret and names its
//! project and subscription, so a genuine webhook replayed to another subscription's
//! receiver is refused (the secret is shown at creation and rotation only). The tests
//! call the API and verify webhooks through the typed client (`pricing-client`).

#![allow(clippy::unwrap_used)]

mod support;
#[path = "support/client.rs"]
mod support_client;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use pricing_client::types::{
    CalculationRequest, DeliveryStatus, ErrorReport, EventQuery, EventType, InstanceRequest,
    InstanceUpdate, PageQuery, ProjectRequest, SubscriptionRequest, SubscriptionStatus,
    WebhookSecret,
};
use pricing_client::webhooks::verify_subscription_signature;
use pricing_client::{Client, WebhookVerifier};
use reqwest::Method;
use serde_json::{Value, json};
use support::{Service, token};
use support_client::{api, poll};

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Hit {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

#[derive(Default)]
struct Receiver {
    hits: Mutex<Vec<Hit>>,
}

impl Receiver {
    fn hits(&self, path_prefix: &str) -> Vec<Hit> {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }
}

/// `/ok...` answers 204, `/gone` 410, `/flaky` 503 (Retry-After: 1) to the first attempt
/// of each webhook and 200 to the second (which comes after the schedule's 5 s: a
/// Retry-After lengthens the schedule's delay, never shortens it).
async fn receive(
    State(r): State<Arc<Receiver>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
    let hit = Hit {
        path: path.clone(),
        headers,
        body,
    };
    let webhook_id = hit.header("webhook-id").to_owned();
    let mut hits = r.hits.lock().unwrap();
    hits.push(hit);
    if path.starts_with("/gone") {
        StatusCode::GONE.into_response()
    } else if path.starts_with("/flaky") {
        let seen = hits
            .iter()
            .filter(|h| h.path.starts_with("/flaky") && h.header("webhook-id") == webhook_id)
            .count();
        if seen <= 1 {
            (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response()
        } else {
            StatusCode::OK.into_response()
        }
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

/// Serves `app` on a free loopback port.
async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn start_receiver() -> (Arc<Receiver>, SocketAddr) {
    let state = Arc::new(Receiver::default());
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(state.clone());
    (state, serve(app).await)
}

/// Waits until the receiver holds a hit under `prefix` that `pick` accepts.
async fn wait_hit(r: &Receiver, prefix: &str, what: &str, pick: impl Fn(&Hit) -> bool) -> Hit {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(h) = r.hits(prefix).into_iter().find(|h| pick(h)) {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} at {prefix}; got {:?}",
            r.hits("/")
                .iter()
                .map(|h| (h.path.clone(), h.json()["type"].clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a hit's service signature verifies with the published keys (the client's
/// verifier, as a receiver would use it).
fn verifies(verifier: &WebhookVerifier, hit: &Hit, body: &[u8]) -> bool {
    verifier
        .verify_service_signature("POST", &hit.path, &hit.headers, body)
        .is_ok()
}

/// Whether a hit's Standard Webhooks signature (`webhook-signature`) verifies under a
/// subscription's secret.
fn v1_verifies(secret: &WebhookSecret, hit: &Hit, body: &[u8]) -> bool {
    verify_subscription_signature(std::slice::from_ref(secret), &hit.headers, body).is_ok()
}

/// The example receiver of infra/webhook-receiver, on the project's venv Python.
struct PythonReceiver {
    child: Child,
    base: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl PythonReceiver {
    /// A receiver of project `project` whose subscription secrets are in `secrets_file`
    /// (read again for every webhook).
    fn start(
        keys_url: &str,
        token: &str,
        project: &str,
        secrets_file: &std::path::Path,
    ) -> PythonReceiver {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let python = root.join(".venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run infra/venv.sh (infra/test.sh does) to install the receiver's \
             dependencies",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(root.join("infra/webhook-receiver/receiver.py"))
            .args(["--port", "0", "--keys-url", keys_url, "--token", token])
            .args(["--project-id", project, "--secrets-file"])
            .arg(secrets_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python receiver");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).expect("receiver output");
        let base = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the receiver did not start: {first}"))
            .to_owned();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        PythonReceiver { child, base, lines }
    }

    async fn wait_line(&self, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| pick(v));
            if let Some(v) = found {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the Python receiver printed no {what}: {:?}",
                self.lines.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PythonReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates project `shop` and its instance `instance`.
async fn shop(client: &Client, instance: InstanceRequest) {
    client
        .create_project(&ProjectRequest::id("shop"))
        .await
        .expect("201");
    client
        .create_instance("shop", &instance)
        .await
        .expect("201");
}

/// The project `shop` and its instance `gig` (`active` or not), deactivated 3 s from now,
/// with a subscription to `instance.deactivated` at `http://ADDR/ok`: the project's, made
/// first, or (`instance_level`) the instance's, made before its date is set. Either way the
/// subscription exists before the event: one that finds none when it is dispatched is
/// never sent.
async fn deactivated_soon(client: &Client, addr: SocketAddr, active: bool, instance_level: bool) {
    client
        .create_project(&ProjectRequest::id("shop"))
        .await
        .expect("201");
    let subscription = to(
        format!("http://{addr}/ok"),
        &[EventType::InstanceDeactivated],
    );
    let soon = || {
        let now = pricing_core::time::Timestamp::now();
        let soon = pricing_core::time::Timestamp::from_millis(now.millis() + 3000).unwrap();
        soon.to_rfc3339()
    };
    if instance_level {
        let instance = InstanceRequest {
            active: Some(active),
            ..InstanceRequest::id("gig")
        };
        client
            .create_instance("shop", &instance)
            .await
            .expect("201");
        client
            .create_instance_subscription("shop", "gig", &subscription)
            .await
            .expect("201");
        let update = InstanceUpdate {
            deactivation_date: Some(Some(soon())),
            ..InstanceUpdate::default()
        };
        client
            .update_instance("shop", "gig", &update)
            .await
            .expect("200");
    } else {
        client
            .create_subscription("shop", &subscription)
            .await
            .expect("201");
        let instance = InstanceRequest {
            active: Some(active),
            deactivation_date: Some(soon()),
            ..InstanceRequest::id("gig")
        };
        client
            .create_instance("shop", &instance)
            .await
            .expect("201");
    }
}

/// A subscription request to `url` for `events` (all when empty).
fn to(url: String, events: &[EventType]) -> SubscriptionRequest {
    SubscriptionRequest {
        callback_url: url,
        events: (!events.is_empty()).then(|| events.to_vec()),
        description: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_reach_real_receivers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = api(&service.base, &token);
    let (receiver, addr) = start_receiver().await;
    let hook = |path: &str| format!("http://{addr}{path}");

    shop(&client, InstanceRequest::id("gig")).await;

    // Project level: everything to /ok (with a query, which is signed too); the Python
    // example receiver; instance level: prices to /flaky; everything to /gone. Each
    // creation answers 201 with the subscription's secret, shown this once.
    let created = client
        .create_subscription(
            "shop",
            &SubscriptionRequest {
                description: Some("main".into()),
                ..to(hook("/ok/in?source=pricing&v=1"), &[])
            },
        )
        .await
        .expect("201");
    let (ok, ok_secret) = (created.subscription.subscription_id, created.secret);
    assert!(ok_secret.reveal().starts_with("whsec_"));
    let keys_url = format!("{}/webhooks/signatureVerificationKeys", service.base);
    let py_secrets = dir.path().join("py-secrets");
    let python = PythonReceiver::start(&keys_url, &token, "shop", &py_secrets);
    let created = client
        .create_subscription(
            "shop",
            &to(format!("{}/py", python.base), &[EventType::PricesUpdated]),
        )
        .await
        .expect("201");
    let (py, py_secret) = (created.subscription.subscription_id, created.secret);
    std::fs::write(&py_secrets, format!("{}\n", py_secret.reveal())).unwrap();
    assert_ne!(
        ok_secret, py_secret,
        "each subscription has a secret of its own"
    );
    let flaky = client
        .create_instance_subscription(
            "shop",
            "gig",
            &to(hook("/flaky"), &[EventType::PricesUpdated]),
        )
        .await
        .expect("201")
        .subscription
        .subscription_id;
    let gone = client
        .create_instance_subscription("shop", "gig", &to(hook("/gone"), &[]))
        .await
        .expect("201")
        .subscription
        .subscription_id;

    // Entries: one is rejected semantically (a sale of an item never registered).
    let entries: pricing_client::types::EntrySubmission =
        serde_json::from_value(json!({"entries": [
            {"type": "productRegistration", "data": {"productId": "ga", "capacity": 100}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}},
            {"type": "itemSale", "transactionId": "bad-1",
                "data": {"itemId": "ghost", "quantity": 1, "price": 10}},
        ]}))
        .unwrap();
    client
        .submit_entries("shop", "gig", &entries)
        .await
        .expect("200");
    let rejected = wait_hit(&receiver, "/ok", "entries.rejected", |h| {
        h.json()["type"] == "entries.rejected"
    })
    .await;
    let event = rejected.json();
    assert_eq!(event["data"]["errors"][0]["transactionId"], "bad-1");
    assert_eq!(event["projectId"], "shop");
    assert_eq!(event["subscriptionId"], ok.as_str());
    assert_eq!(event["instanceId"], "gig");
    assert_eq!(event["id"], rejected.header("webhook-id"));
    // The webhook names its event as the events listing does.
    let listed = client
        .events(
            "shop",
            "gig",
            &EventQuery {
                event_type: Some(EventType::EntriesRejected),
                ..EventQuery::default()
            },
        )
        .await
        .expect("events");
    assert!(
        listed
            .items
            .iter()
            .any(|e| event["eventId"] == e.id.as_str()),
        "{event} among {:?}",
        listed.items
    );

    // calculatePrices: prices.updated with the metadata.
    let body = client
        .calculate_prices(
            "shop",
            &CalculationRequest {
                instance_ids: Some(vec!["gig".into()]),
                metadata: Some(json!({"run": 7})),
            },
        )
        .await
        .expect("202");
    let calculation_id = body.calculations[0].calculation_id.clone();
    let priced = wait_hit(&receiver, "/ok", "prices.updated", |h| {
        h.json()["type"] == "prices.updated"
    })
    .await;
    let event = priced.json();
    assert_eq!(event["data"]["metadata"], json!({"run": 7}));
    assert_eq!(event["data"]["calculationId"], calculation_id.as_str());
    assert_eq!(event["data"]["trigger"], "request");
    assert_eq!(event["data"]["prices"][0]["itemId"], "a");
    assert_eq!(event["apiVersion"], "3.1.0");
    assert_eq!(event["projectId"], "shop");
    assert_eq!(event["subscriptionId"], ok.as_str());
    assert_eq!(priced.path, "/ok/in?source=pricing&v=1");
    for header in [
        "date",
        "webhook-timestamp",
        "x-signature-key-id",
        "webhook-signature",
    ] {
        assert!(!priced.header(header).is_empty(), "{header} is sent");
    }

    // Signatures verify with the published keys (fetched by the client: 200), and not
    // over a tampered body.
    let verifier = client.webhook_verifier().await.expect("the published keys");
    assert!(verifies(&verifier, &priced, &priced.body));
    assert!(verifies(&verifier, &rejected, &rejected.body));
    let mut tampered = priced.body.to_vec();
    let at = tampered.len() / 2;
    tampered[at] ^= 0x01;
    assert!(!verifies(&verifier, &priced, &tampered));
    // The whole check of a receiver of subscription ok: both signatures, fresh Date and
    // webhook-timestamp, the envelope.
    let receiver_ok = verifier.clone().with_secret(ok_secret.clone());
    let envelope = receiver_ok
        .verify("POST", &priced.path, &priced.headers, &priced.body)
        .expect("a genuine webhook of subscription ok");
    assert_eq!(envelope.id, priced.header("webhook-id"));
    assert_eq!(envelope.event_type, EventType::PricesUpdated);
    assert_eq!(envelope.subscription_id.as_deref(), Some(ok.as_str()));
    assert!(
        receiver_ok
            .verify("POST", &priced.path, &priced.headers, &tampered)
            .is_err()
    );

    // The subscription's own signature verifies under its secret only: a genuine webhook
    // of subscription ok is no webhook of subscription py (the replay case).
    assert!(v1_verifies(&ok_secret, &priced, &priced.body));
    assert!(v1_verifies(&ok_secret, &rejected, &rejected.body));
    assert!(!v1_verifies(&ok_secret, &priced, &tampered));
    assert!(!v1_verifies(&py_secret, &priced, &priced.body));
    assert!(!v1_verifies(&py_secret, &rejected, &rejected.body));
    assert!(
        verifier
            .clone()
            .with_secret(py_secret.clone())
            .verify("POST", &priced.path, &priced.headers, &priced.body)
            .is_err()
    );

    // The Python example verified a real delivery (both signatures, its project), and
    // refuses a tampered copy and a genuine webhook of another subscription. The replays
    // go to receivers, not to the API: hand-built.
    python
        .wait_line("verified prices.updated", |v| {
            v["verified"] == true
                && v["type"] == "prices.updated"
                && v["subscriptionId"] == py.as_str()
        })
        .await;
    let http = reqwest::Client::new();
    let replay = |base: &str, body: Vec<u8>| {
        let mut req = http.post(format!("{base}{}", priced.path));
        for (k, v) in &priced.headers {
            if !matches!(k.as_str(), "host" | "content-length") {
                req = req.header(k, v);
            }
        }
        req.body(body).send()
    };
    assert_eq!(
        replay(&python.base, priced.body.to_vec())
            .await
            .unwrap()
            .status(),
        401,
        "a webhook signed for subscription ok, replayed to subscription py's receiver"
    );
    python
        .wait_line("the replay refused", |v| {
            v["verified"] == false && v["refused"] == "subscription signature"
        })
        .await;
    assert_eq!(replay(&python.base, tampered).await.unwrap().status(), 401);
    // A receiver pins its project: with ok's secret, the webhook passes the receiver of
    // project shop and is refused by one of another project.
    let ok_secrets = dir.path().join("ok-secrets");
    std::fs::write(&ok_secrets, format!("{}\n", ok_secret.reveal())).unwrap();
    let shop = PythonReceiver::start(&keys_url, &token, "shop", &ok_secrets);
    let rival = PythonReceiver::start(&keys_url, &token, "rival", &ok_secrets);
    assert_eq!(
        replay(&shop.base, priced.body.to_vec())
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        replay(&rival.base, priced.body.to_vec())
            .await
            .unwrap()
            .status(),
        401
    );
    rival
        .wait_line("the other project refused", |v| v["refused"] == "project")
        .await;

    // The secret is never shown again: not in a listing. Read raw, as the service wrote
    // it (a typed listing would drop a field it does not know).
    let (s, listing) = client
        .raw::<()>(
            Method::GET,
            &["projects", "shop", "subscriptions"],
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(s, 200);
    let text = String::from_utf8(listing).unwrap();
    assert!(
        !text.contains("secret") && !text.contains(&ok_secret.reveal()[6..]),
        "{text}"
    );
    assert_eq!(
        client.subscriptions("shop").await.expect("200").items.len(),
        2
    );

    // The flaky receiver got the second attempt with the same webhook-id.
    let second = wait_hit(&receiver, "/flaky", "a second attempt", |h| {
        receiver
            .hits("/flaky")
            .iter()
            .filter(|o| o.header("webhook-id") == h.header("webhook-id"))
            .count()
            >= 2
    })
    .await;
    let attempts: Vec<Hit> = receiver
        .hits("/flaky")
        .into_iter()
        .filter(|h| h.header("webhook-id") == second.header("webhook-id"))
        .collect();
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|h| h.json()["id"] == second.header("webhook-id"))
    );
    let all = PageQuery::default();
    let log = poll(
        "the flaky delivery succeeded",
        || client.deliveries("shop", &flaky, &all),
        |b| b.items.first().map(|d| d.status) == Some(DeliveryStatus::Succeeded),
    )
    .await;
    let delivery = &log.items[0];
    assert_eq!(delivery.attempt, 2);
    assert_eq!(delivery.webhook_id, second.header("webhook-id"));
    let statuses: Vec<Option<u16>> = delivery
        .attempts
        .iter()
        .map(|a| a.response_status)
        .collect();
    assert_eq!(statuses, [Some(503), Some(200)]);

    // 410 disabled the /gone subscription; later events do not go there.
    let listing = poll(
        "the /gone subscription disabled",
        || client.instance_subscriptions("shop", "gig"),
        |b| {
            b.items
                .iter()
                .any(|s| s.subscription_id == gone && s.status == SubscriptionStatus::Disabled)
        },
    )
    .await;
    assert!(
        listing
            .items
            .iter()
            .any(|s| s.callback_url == hook("/gone"))
    );
    let gone_hits = receiver.hits("/gone").len();
    client
        .calculate_prices(
            "shop",
            &CalculationRequest {
                instance_ids: Some(vec!["gig".into()]),
                metadata: Some(json!({"run": 8})),
            },
        )
        .await
        .expect("202");
    wait_hit(&receiver, "/ok", "the second prices.updated", |h| {
        h.json()["data"]["metadata"]["run"] == 8
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.hits("/gone").len(), gone_hits, "nothing after 410");

    // Rotation: a new secret, shown once; the old one signs beside it for the grace period.
    let rotated = client
        .rotate_subscription_secret("shop", &ok)
        .await
        .expect("200");
    let new_secret = rotated.secret.clone();
    assert_ne!(new_secret, ok_secret);
    assert!(rotated.previous_secret_expires_at.is_some(), "{rotated:?}");

    // Manual trigger: the latest prices again, trigger "manual", original calculation id.
    client.trigger_subscription("shop", &ok).await.expect("202");
    let manual = wait_hit(&receiver, "/ok", "a manual resend", |h| {
        h.json()["data"]["trigger"] == "manual"
    })
    .await;
    let latest = wait_hit(&receiver, "/ok", "the second prices.updated", |h| {
        h.json()["data"]["metadata"]["run"] == 8
    })
    .await;
    assert_eq!(
        manual.json()["data"]["calculationId"],
        latest.json()["data"]["calculationId"]
    );
    assert_ne!(manual.header("webhook-id"), latest.header("webhook-id"));
    assert_eq!(manual.json()["subscriptionId"], ok.as_str());
    assert_eq!(
        manual.header("webhook-signature").split(' ').count(),
        2,
        "signed with the new and the replaced secret"
    );
    assert!(v1_verifies(&new_secret, &manual, &manual.body));
    assert!(v1_verifies(&ok_secret, &manual, &manual.body));
    assert!(!v1_verifies(&py_secret, &manual, &manual.body));
    // A receiver that has switched to the new secret accepts it whole.
    verifier
        .clone()
        .with_secret(new_secret.clone())
        .verify("POST", &manual.path, &manual.headers, &manual.body)
        .expect("verifies under the new secret");

    // A client's asynchronous error report shows in the delivery log.
    let accepted = client
        .report_webhook_error(&ErrorReport {
            webhook_id: manual.header("webhook-id").to_owned(),
            message: "queue full".into(),
            status: Some(500),
        })
        .await
        .expect("202");
    assert_eq!(accepted.webhook_id, manual.header("webhook-id"));
    let log = poll(
        "the client report",
        || client.deliveries("shop", &ok, &all),
        |b| {
            b.items.iter().any(|d| {
                d.client_reports
                    .first()
                    .is_some_and(|r| r.message == "queue full")
            })
        },
    )
    .await;
    assert!(log.items.len() >= 3);
    let unknown = client
        .report_webhook_error(&ErrorReport {
            webhook_id: "wh_unknown".into(),
            message: "x".into(),
            status: None,
        })
        .await
        .expect_err("an unknown webhook");
    assert_eq!(unknown.status(), Some(404));
    assert_eq!(unknown.problem().map(|p| p.status), Some(404));
}

/// A receiver that takes 200 ms per webhook, so a kill finds attempts in flight.
async fn start_slow_receiver() -> (Arc<Receiver>, SocketAddr) {
    async fn slow(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
        tokio::time::sleep(Duration::from_millis(200)).await;
        r.hits.lock().unwrap().push(Hit {
            path: "/slow".into(),
            headers,
            body,
        });
        StatusCode::NO_CONTENT
    }
    let state = Arc::new(Receiver::default());
    let app = axum::Router::new().fallback(slow).with_state(state.clone());
    (state, serve(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_webhook_is_lost_across_sigkill() {
    const RUNS: u64 = 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = api(&service.base, &token);
    let (receiver, addr) = start_slow_receiver().await;
    shop(&client, InstanceRequest::id("gig")).await;
    client
        .create_subscription(
            "shop",
            &to(format!("http://{addr}/slow"), &[EventType::PricesUpdated]),
        )
        .await
        .expect("201");
    for run in 0..RUNS {
        client
            .calculate_prices(
                "shop",
                &CalculationRequest {
                    instance_ids: None,
                    metadata: Some(json!({"run": run})),
                },
            )
            .await
            .expect("202");
    }
    // Kill while webhooks are in flight.
    wait_hit(&receiver, "/slow", "a first webhook", |_| true).await;
    service.kill9();
    let delivered_before = receiver.hits("/slow").len();
    assert!(
        delivered_before < RUNS as usize,
        "the kill came too late to mean anything"
    );

    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let client = api(&service.base, &token);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs: std::collections::BTreeSet<u64> = receiver
            .hits("/slow")
            .iter()
            .filter_map(|h| h.json()["data"]["metadata"]["run"].as_u64())
            .collect();
        if runs.len() == RUNS as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the restart only runs {runs:?} arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every delivery is recorded as succeeded (a resend after the kill is allowed).
    let subs = client.subscriptions("shop").await.expect("200");
    let sub = subs.items[0].subscription_id.clone();
    let page = PageQuery::limit(100);
    let log = poll(
        "every delivery succeeded",
        || client.deliveries("shop", &sub, &page),
        |b| {
            b.items.len() == RUNS as usize
                && b.items
                    .iter()
                    .all(|d| d.status == DeliveryStatus::Succeeded)
        },
    )
    .await;
    assert_eq!(log.items.len(), RUNS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deactivation_is_announced_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = api(&service.base, &token);
    let (receiver, addr) = start_receiver().await;
    deactivated_soon(&client, addr, true, false).await;
    let hit = wait_hit(&receiver, "/ok", "instance.deactivated", |h| {
        h.json()["type"] == "instance.deactivated"
    })
    .await;
    assert_eq!(hit.json()["instanceId"], "gig");
    let details = client.instance("shop", "gig").await.expect("200");
    assert!(!details.instance.active, "{details:?}");
    // Later scheduler ticks do not announce it again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.hits("/ok").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inactive_instance_is_announced_too() {
    // issue 11, item 4: instance.deactivated goes out whether the instance is active or not.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = api(&service.base, &token);
    let (receiver, addr) = start_receiver().await;
    // At the instance's own subscription.
    deactivated_soon(&client, addr, false, true).await;
    let hit = wait_hit(&receiver, "/ok", "instance.deactivated", |h| {
        h.json()["type"] == "instance.deactivated"
    })
    .await;
    assert_eq!(hit.json()["instanceId"], "gig");
    let details = client.instance("shop", "gig").await.expect("200");
    assert!(!details.instance.active, "{details:?}");
    // Later scheduler ticks do not announce it again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.hits("/ok").len(), 1);
}
