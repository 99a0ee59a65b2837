//! End-to-end: signed webhooks from the real `standalone` binary to real HTTP receivers
//! (one in this test, and the Python example in infra/webhook-receiver). Semantic
//! rejections arrive as `entries.rejected` with their transaction id, calculatePrices as
//! `prices.updated` with its metadata; signatures verify with the published keys and fail
//! on a tampered body; a receiver that fails twice gets the third attempt with the same
//! webhook-id; a 410 disables the subscription; a manual trigger resends the latest
//! prices; a client's error report shows in the delivery log. Every delivery also carries
//! the Standard Webhooks signature under its subscription's own secret and names its
//! project and subscription, so a genuine webhook replayed to another subscription's
//! receiver is refused (the secret is shown at creation and rotation only).

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use reqwest::Method;
use serde_json::{Value, json};
use support::{Service, send, token, wait_for};

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HashMap<String, String>,
    body: Bytes,
}

impl Hit {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
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

/// `/ok...` answers 204, `/gone` 410, `/flaky` 503 (Retry-After: 1) to the first two
/// attempts of each webhook and 200 to the third.
async fn receive(
    State(r): State<Arc<Receiver>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
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
        if seen <= 2 {
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

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Verifies a hit's signature with the published JWK set, as a receiver would.
fn verifies(jwks: &Value, hit: &Hit, body: &[u8]) -> bool {
    let kid = hit.header("x-signature-key-id");
    let Some(jwk) = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid)
    else {
        return false;
    };
    let coord = |c: &str| URL_SAFE_NO_PAD.decode(jwk[c].as_str().unwrap()).unwrap();
    let mut point = vec![4u8];
    point.extend(coord("x"));
    point.extend(coord("y"));
    let mut message = b"POST".to_vec();
    message.extend(hit.path.as_bytes());
    message.extend(hit.header("date").as_bytes());
    message.extend(body);
    let signature = unhex(hit.header("x-signature-secp256r1-sha256"));
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &point)
        .verify(&message, &signature)
        .is_ok()
}

/// Verifies a hit's Standard Webhooks signature (`webhook-signature`, one or more
/// space-separated `v1,<base64>`) under a subscription's `whsec_` secret, as a receiver
/// would: HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}", keyed with the
/// base64-decoded secret.
fn v1_verifies(secret: &str, hit: &Hit, body: &[u8]) -> bool {
    use aws_lc_rs::hmac;
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("base64");
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
    let mut signed = format!(
        "{}.{}.",
        hit.header("webhook-id"),
        hit.header("webhook-timestamp")
    )
    .into_bytes();
    signed.extend_from_slice(body);
    hit.header("webhook-signature")
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|tag| hmac::verify(&key, &signed, &tag).is_ok())
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

async fn post(client: &reqwest::Client, url: String, token: &str, body: Value) -> (u16, Value) {
    send(client, Method::POST, url, token, Some(body))
        .await
        .expect("POST")
}

/// POSTs a create request and expects 201; returns what was created.
async fn create(client: &reqwest::Client, url: String, token: &str, body: Value) -> Value {
    let (s, created) = post(client, url, token, body).await;
    assert_eq!(s, 201, "{created}");
    created
}

async fn subscribe(client: &reqwest::Client, url: String, token: &str, body: Value) -> String {
    subscribe_with_secret(client, url, token, body).await.0
}

/// Subscribes; returns the subscription id and its signing secret (shown this once).
async fn subscribe_with_secret(
    client: &reqwest::Client,
    url: String,
    token: &str,
    body: Value,
) -> (String, String) {
    let sub = create(client, url, token, body).await;
    let secret = sub["secret"]
        .as_str()
        .expect("the creation response carries the secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    (
        sub["subscriptionId"].as_str().unwrap().to_owned(),
        secret.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_reach_real_receivers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let (receiver, addr) = start_receiver().await;
    let hook = |path: &str| format!("http://{addr}{path}");

    create(
        &client,
        format!("{base}/projects"),
        &token,
        json!({"projectId": "shop"}),
    )
    .await;
    create(
        &client,
        format!("{base}/projects/shop/instances"),
        &token,
        json!({"instanceId": "gig"}),
    )
    .await;

    // Project level: everything to /ok (with a query, which is signed too); the Python
    // example receiver; instance level: prices to /flaky; everything to /gone.
    let (ok, ok_secret) = subscribe_with_secret(
        &client,
        format!("{base}/projects/shop/subscriptions"),
        &token,
        json!({"callbackUrl": hook("/ok/in?source=pricing&v=1"), "description": "main"}),
    )
    .await;
    let keys_url = format!("{base}/webhooks/signatureVerificationKeys");
    let py_secrets = dir.path().join("py-secrets");
    let python = PythonReceiver::start(&keys_url, &token, "shop", &py_secrets);
    let (py, py_secret) = subscribe_with_secret(
        &client,
        format!("{base}/projects/shop/subscriptions"),
        &token,
        json!({"callbackUrl": format!("{}/py", python.base), "events": ["prices.updated"]}),
    )
    .await;
    std::fs::write(&py_secrets, format!("{py_secret}\n")).unwrap();
    assert_ne!(
        ok_secret, py_secret,
        "each subscription has a secret of its own"
    );
    let flaky = subscribe(
        &client,
        format!("{base}/projects/shop/instances/gig/subscriptions"),
        &token,
        json!({"callbackUrl": hook("/flaky"), "events": ["prices.updated"]}),
    )
    .await;
    let gone = subscribe(
        &client,
        format!("{base}/projects/shop/instances/gig/subscriptions"),
        &token,
        json!({"callbackUrl": hook("/gone")}),
    )
    .await;

    // Entries: one is rejected semantically (a sale of an item never registered).
    let (s, body) = post(
        &client,
        format!("{base}/projects/shop/instances/gig/entries"),
        &token,
        json!({"entries": [
            {"type": "productRegistration", "data": {"productId": "ga", "capacity": 100}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga",
                "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
                "priceSettings": {"min": 10, "max": 100, "default": 40}}},
            {"type": "itemSale", "transactionId": "bad-1",
                "data": {"itemId": "ghost", "quantity": 1, "price": 10}},
        ]}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
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

    // calculatePrices: prices.updated with the metadata.
    let (s, body) = post(
        &client,
        format!("{base}/projects/shop/calculatePrices"),
        &token,
        json!({"instanceIds": ["gig"], "metadata": {"run": 7}}),
    )
    .await;
    assert_eq!(s, 202, "{body}");
    let calculation_id = body["calculations"][0]["calculationId"].clone();
    let priced = wait_hit(&receiver, "/ok", "prices.updated", |h| {
        h.json()["type"] == "prices.updated"
    })
    .await;
    let event = priced.json();
    assert_eq!(event["data"]["metadata"], json!({"run": 7}));
    assert_eq!(event["data"]["calculationId"], calculation_id);
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

    // Signatures verify with the published keys, and not over a tampered body.
    let (s, jwks) = send(&client, Method::GET, keys_url.clone(), &token, None)
        .await
        .unwrap();
    assert_eq!(s, 200);
    assert!(verifies(&jwks, &priced, &priced.body));
    assert!(verifies(&jwks, &rejected, &rejected.body));
    let mut tampered = priced.body.to_vec();
    let at = tampered.len() / 2;
    tampered[at] ^= 0x01;
    assert!(!verifies(&jwks, &priced, &tampered));

    // The subscription's own signature verifies under its secret only: a genuine webhook
    // of subscription ok is no webhook of subscription py (the replay case).
    assert!(v1_verifies(&ok_secret, &priced, &priced.body));
    assert!(v1_verifies(&ok_secret, &rejected, &rejected.body));
    assert!(!v1_verifies(&ok_secret, &priced, &tampered));
    assert!(!v1_verifies(&py_secret, &priced, &priced.body));
    assert!(!v1_verifies(&py_secret, &rejected, &rejected.body));

    // The Python example verified a real delivery (both signatures, its project), and
    // refuses a tampered copy and a genuine webhook of another subscription.
    python
        .wait_line("verified prices.updated", |v| {
            v["verified"] == true
                && v["type"] == "prices.updated"
                && v["subscriptionId"] == py.as_str()
        })
        .await;
    let replay = |base: &str, body: Vec<u8>| {
        let mut req = client.post(format!("{base}{}", priced.path));
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
    std::fs::write(&ok_secrets, format!("{ok_secret}\n")).unwrap();
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

    // The secret is never shown again: not in a listing.
    let (s, listing) = send(
        &client,
        Method::GET,
        format!("{base}/projects/shop/subscriptions"),
        &token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    let text = listing.to_string();
    assert!(
        !text.contains("secret") && !text.contains(&ok_secret[6..]),
        "{listing}"
    );

    // The flaky receiver got the third attempt with the same webhook-id.
    let third = wait_hit(&receiver, "/flaky", "a third attempt", |h| {
        receiver
            .hits("/flaky")
            .iter()
            .filter(|o| o.header("webhook-id") == h.header("webhook-id"))
            .count()
            >= 3
    })
    .await;
    let attempts: Vec<Hit> = receiver
        .hits("/flaky")
        .into_iter()
        .filter(|h| h.header("webhook-id") == third.header("webhook-id"))
        .collect();
    assert_eq!(attempts.len(), 3);
    assert!(
        attempts
            .iter()
            .all(|h| h.json()["id"] == third.header("webhook-id"))
    );
    let log = wait_for(
        &client,
        &format!("{base}/projects/shop/subscriptions/{flaky}/deliveries"),
        &token,
        "the flaky delivery succeeded",
        |b| b["items"][0]["status"] == "succeeded",
    )
    .await;
    let delivery = &log["items"][0];
    assert_eq!(delivery["attempt"], 3);
    assert_eq!(delivery["webhookId"], third.header("webhook-id"));
    let statuses: Vec<Value> = delivery["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["responseStatus"].clone())
        .collect();
    assert_eq!(statuses, [json!(503), json!(503), json!(200)]);

    // 410 disabled the /gone subscription; later events do not go there.
    let listing = wait_for(
        &client,
        &format!("{base}/projects/shop/instances/gig/subscriptions"),
        &token,
        "the /gone subscription disabled",
        |b| {
            b["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["subscriptionId"] == gone.as_str() && s["status"] == "disabled")
        },
    )
    .await;
    assert!(
        listing["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["callbackUrl"] == hook("/gone"))
    );
    let gone_hits = receiver.hits("/gone").len();
    let (s, body) = post(
        &client,
        format!("{base}/projects/shop/calculatePrices"),
        &token,
        json!({"instanceIds": ["gig"], "metadata": {"run": 8}}),
    )
    .await;
    assert_eq!(s, 202, "{body}");
    wait_hit(&receiver, "/ok", "the second prices.updated", |h| {
        h.json()["data"]["metadata"]["run"] == 8
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.hits("/gone").len(), gone_hits, "nothing after 410");

    // Rotation: a new secret, shown once; the old one signs beside it for the grace period.
    let (s, rotated) = post(
        &client,
        format!("{base}/projects/shop/subscriptions/{ok}/secret"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, ok_secret);
    assert!(rotated["previousSecretExpiresAt"].is_string(), "{rotated}");

    // Manual trigger: the latest prices again, trigger "manual", original calculation id.
    let (s, body) = post(
        &client,
        format!("{base}/projects/shop/subscriptions/{ok}/trigger"),
        &token,
        json!({}),
    )
    .await;
    assert_eq!(s, 202, "{body}");
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

    // A client's asynchronous error report shows in the delivery log.
    let (s, body) = post(
        &client,
        format!("{base}/webhooks/errors"),
        &token,
        json!({"webhookId": manual.header("webhook-id"), "message": "queue full", "status": 500}),
    )
    .await;
    assert_eq!(s, 202, "{body}");
    let log = wait_for(
        &client,
        &format!("{base}/projects/shop/subscriptions/{ok}/deliveries"),
        &token,
        "the client report",
        |b| {
            b["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["clientReports"][0]["message"] == "queue full")
        },
    )
    .await;
    assert!(log["items"].as_array().unwrap().len() >= 3);
    let (s, _) = post(
        &client,
        format!("{base}/webhooks/errors"),
        &token,
        json!({"webhookId": "wh_unknown", "message": "x"}),
    )
    .await;
    assert_eq!(s, 404);
}

/// A receiver that takes 200 ms per webhook, so a kill finds attempts in flight.
async fn start_slow_receiver() -> (Arc<Receiver>, SocketAddr) {
    async fn slow(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let headers = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
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
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let (receiver, addr) = start_slow_receiver().await;
    create(
        &client,
        format!("{base}/projects"),
        &token,
        json!({"projectId": "shop"}),
    )
    .await;
    create(
        &client,
        format!("{base}/projects/shop/instances"),
        &token,
        json!({"instanceId": "gig"}),
    )
    .await;
    subscribe(
        &client,
        format!("{base}/projects/shop/subscriptions"),
        &token,
        json!({"callbackUrl": format!("http://{addr}/slow"), "events": ["prices.updated"]}),
    )
    .await;
    for run in 0..RUNS {
        let (s, body) = post(
            &client,
            format!("{base}/projects/shop/calculatePrices"),
            &token,
            json!({"metadata": {"run": run}}),
        )
        .await;
        assert_eq!(s, 202, "{body}");
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
    let base = service.base.clone();
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
    let (s, subs) = send(
        &client,
        Method::GET,
        format!("{base}/projects/shop/subscriptions"),
        &token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    let sub = subs["items"][0]["subscriptionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = wait_for(
        &client,
        &format!("{base}/projects/shop/subscriptions/{sub}/deliveries?limit=100"),
        &token,
        "every delivery succeeded",
        |b| {
            let items = b["items"].as_array().unwrap();
            items.len() == RUNS as usize && items.iter().all(|d| d["status"] == "succeeded")
        },
    )
    .await;
    assert_eq!(log["items"].as_array().unwrap().len(), RUNS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deactivation_is_announced_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let service = Service::start_with(&data, &["--schedule-tick", "1"]);
    let token = token(&data, "hooks");
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let (receiver, addr) = start_receiver().await;
    create(
        &client,
        format!("{base}/projects"),
        &token,
        json!({"projectId": "shop"}),
    )
    .await;
    let now = pricing_core::time::Timestamp::now();
    let soon = pricing_core::time::Timestamp::from_millis(now.millis() + 2000).unwrap();
    create(
        &client,
        format!("{base}/projects/shop/instances"),
        &token,
        json!({"instanceId": "gig", "active": true,
               "deactivationDate": soon.to_rfc3339()}),
    )
    .await;
    subscribe(
        &client,
        format!("{base}/projects/shop/instances/gig/subscriptions"),
        &token,
        json!({"callbackUrl": format!("http://{addr}/ok"), "events": ["instance.deactivated"]}),
    )
    .await;
    let hit = wait_hit(&receiver, "/ok", "instance.deactivated", |h| {
        h.json()["type"] == "instance.deactivated"
    })
    .await;
    assert_eq!(hit.json()["instanceId"], "gig");
    let (s, instance) = send(
        &client,
        Method::GET,
        format!("{base}/projects/shop/instances/gig"),
        &token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    assert_eq!(instance["active"], false);
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
    let client = reqwest::Client::new();
    let base = service.base.clone();
    let (receiver, addr) = start_receiver().await;
    create(
        &client,
        format!("{base}/projects"),
        &token,
        json!({"projectId": "shop"}),
    )
    .await;
    let now = pricing_core::time::Timestamp::now();
    let soon = pricing_core::time::Timestamp::from_millis(now.millis() + 2000).unwrap();
    create(
        &client,
        format!("{base}/projects/shop/instances"),
        &token,
        json!({"instanceId": "gig", "active": false,
               "deactivationDate": soon.to_rfc3339()}),
    )
    .await;
    subscribe(
        &client,
        format!("{base}/projects/shop/instances/gig/subscriptions"),
        &token,
        json!({"callbackUrl": format!("http://{addr}/ok"), "events": ["instance.deactivated"]}),
    )
    .await;
    let hit = wait_hit(&receiver, "/ok", "instance.deactivated", |h| {
        h.json()["type"] == "instance.deactivated"
    })
    .await;
    assert_eq!(hit.json()["instanceId"], "gig");
    let (s, instance) = send(
        &client,
        Method::GET,
        format!("{base}/projects/shop/instances/gig"),
        &token,
        None,
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    assert_eq!(instance["active"], false);
    // Later scheduler ticks do not announce it again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(receiver.hits("/ok").len(), 1);
}
