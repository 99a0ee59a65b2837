//! The client against a tiny local axum server: retries after Retry-After, token refresh,
//! typed problems; and the webhook verifier against the service's own signing code.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use pricing_client::types::{JwkSet, PageQuery, ProjectRequest};
use pricing_client::{Client, Error, RetryPolicy, TokenAuth, VerifyError, WebhookVerifier};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{WebhookSecret, http_date, signing_input};
use serde_json::json;

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn problem(status: StatusCode, detail: &str) -> Response {
    let body = json!({"type": "about:blank", "title": status.canonical_reason(),
        "status": status.as_u16(), "detail": detail,
        "errors": [{"pointer": "/projectId", "code": "pattern", "message": "not an id"}]});
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

fn project_json() -> String {
    json!({"projectId": "shop", "name": "shop", "createdAt": "2026-01-01T00:00:00Z"}).to_string()
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_then_succeeds() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let app = Router::new().route(
        "/projects/shop",
        get(move || {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) < 2 {
                    let mut r = problem(StatusCode::TOO_MANY_REQUESTS, "slow down");
                    r.headers_mut()
                        .insert("retry-after", HeaderValue::from_static("0"));
                    r
                } else {
                    ([("content-type", "application/json")], project_json()).into_response()
                }
            }
        }),
    );
    let base = serve(app).await;
    let api = Client::with_token(&base, "t").unwrap();
    let project = api.project("shop").await.unwrap();
    assert_eq!(project.project_id, "shop");
    assert_eq!(calls.load(Ordering::SeqCst), 3, "two 429s, then the answer");
}

#[tokio::test]
async fn a_503_after_the_last_retry_is_the_typed_problem() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let app = Router::new().route(
        "/projects",
        post(move || {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                let mut r = problem(StatusCode::SERVICE_UNAVAILABLE, "busy");
                r.headers_mut()
                    .insert("retry-after", HeaderValue::from_static("0"));
                r
            }
        }),
    );
    let base = serve(app).await;
    let api = Client::builder(&base)
        .bearer("t")
        .retry(RetryPolicy {
            max_retries: 2,
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    let err = api
        .create_project(&ProjectRequest::id("shop"))
        .await
        .unwrap_err();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "one attempt and two retries"
    );
    let p = err.problem().expect("a problem");
    assert_eq!(p.status, 503);
    assert_eq!(p.detail, "busy");
}

#[tokio::test]
async fn problems_are_typed_and_an_undocumented_success_status_is_an_error() {
    let app = Router::new()
        .route(
            "/projects",
            post(|| async { problem(StatusCode::BAD_REQUEST, "invalid project") }),
        )
        .route(
            "/projects/shop",
            get(|| async { (StatusCode::CREATED, project_json()) }),
        );
    let base = serve(app).await;
    let api = Client::with_token(&base, "t").unwrap();
    match api.create_project(&ProjectRequest::id("-")).await {
        Err(Error::Api(p)) => {
            assert_eq!(p.status, 400);
            assert_eq!(p.title, "Bad Request");
            let e = p.error_at("/projectId").expect("the field error");
            assert_eq!(
                (e.code.as_str(), e.message.as_str()),
                ("pattern", "not an id")
            );
        }
        other => panic!("expected a problem: {other:?}"),
    }
    match api.project("shop").await {
        Err(Error::UnexpectedStatus {
            expected: 200,
            status: 201,
            ..
        }) => {}
        other => panic!("expected an unexpected status: {other:?}"),
    }
}

/// A token endpoint issuing `tok-1`, `tok-2`, ... valid `ttl` seconds, and an API that
/// accepts only the latest token (`revoked` makes it refuse every token issued so far).
#[derive(Default)]
struct Tokens {
    issued: AtomicUsize,
    accepted_from: AtomicUsize,
    ttl: u64,
}

async fn token_server(tokens: Arc<Tokens>) -> String {
    let t1 = tokens.clone();
    let t2 = tokens.clone();
    let app = Router::new()
        .route(
            "/oauth2/token",
            post(move |headers: HeaderMap, body: String| {
                let t = t1.clone();
                async move {
                    // Credentials in the form, or as HTTP Basic (base64 of "cid:s3cret").
                    let basic = headers.get("authorization").and_then(|v| v.to_str().ok())
                        == Some("Basic Y2lkOnMzY3JldA==");
                    let form = body.contains("client_secret=s3cret") && body.contains("client_id=cid");
                    if basic == form {
                        return (
                            StatusCode::UNAUTHORIZED,
                            [("content-type", "application/json")],
                            json!({"error": "invalid_client", "error_description": "unknown client"})
                                .to_string(),
                        );
                    }
                    assert!(body.contains("grant_type=client_credentials"), "{body}");
                    let n = t.issued.fetch_add(1, Ordering::SeqCst) + 1;
                    (
                        StatusCode::OK,
                        [("content-type", "application/json")],
                        json!({"access_token": format!("tok-{n}"), "token_type": "Bearer",
                               "expires_in": t.ttl})
                        .to_string(),
                    )
                }
            }),
        )
        .route(
            "/projects/shop",
            get(move |headers: HeaderMap| {
                let t = t2.clone();
                async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let n: usize = auth
                        .strip_prefix("Bearer tok-")
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    if n == 0 || n < t.accepted_from.load(Ordering::SeqCst) {
                        return problem(StatusCode::UNAUTHORIZED, "invalid token");
                    }
                    project_json().into_response()
                }
            }),
        );
    serve(app).await
}

#[tokio::test]
async fn client_credentials_are_exchanged_once_and_renewed_on_a_401() {
    let tokens = Arc::new(Tokens {
        ttl: 3600,
        ..Tokens::default()
    });
    let base = token_server(tokens.clone()).await;
    let api = Client::with_client_credentials(&base, "cid", "s3cret").unwrap();
    api.project("shop").await.unwrap();
    api.project("shop").await.unwrap();
    assert_eq!(
        tokens.issued.load(Ordering::SeqCst),
        1,
        "the token is reused"
    );
    // Tokens up to tok-1 no longer work: the 401 makes the client fetch tok-2 and retry.
    tokens.accepted_from.store(2, Ordering::SeqCst);
    api.project("shop").await.unwrap();
    assert_eq!(tokens.issued.load(Ordering::SeqCst), 2);
    // A token that stays refused: one renewal, then the 401 problem stands.
    tokens.accepted_from.store(100, Ordering::SeqCst);
    let err = api.project("shop").await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert_eq!(tokens.issued.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_expiring_token_is_renewed_before_use_and_bad_credentials_are_an_oauth_error() {
    // Valid for less than the renewal margin: every call gets a fresh token.
    let tokens = Arc::new(Tokens {
        ttl: 30,
        ..Tokens::default()
    });
    let base = token_server(tokens.clone()).await;
    let api = Client::with_client_credentials(&base, "cid", "s3cret").unwrap();
    api.project("shop").await.unwrap();
    api.project("shop").await.unwrap();
    assert_eq!(tokens.issued.load(Ordering::SeqCst), 2);

    let wrong = Client::with_client_credentials(&base, "cid", "nope").unwrap();
    match wrong.project("shop").await {
        Err(Error::OAuth { status: 401, error }) => assert_eq!(error.error, "invalid_client"),
        other => panic!("expected the token endpoint's refusal: {other:?}"),
    }
    let direct = api
        .request_token(
            &format!("{base}/oauth2/token"),
            "cid",
            "s3cret",
            TokenAuth::Form,
        )
        .await
        .unwrap();
    assert_eq!(direct.token_type, "Bearer");
    assert_eq!(direct.expires_in, 30);
    let basic = Client::builder(&base)
        .client_credentials("cid", "s3cret")
        .token_auth(TokenAuth::Basic)
        .build()
        .unwrap();
    basic.project("shop").await.unwrap();
    let wrong_basic = Client::builder(&base)
        .client_credentials("cid", "nope")
        .token_auth(TokenAuth::Basic)
        .build()
        .unwrap();
    assert_eq!(
        wrong_basic.project("shop").await.unwrap_err().status(),
        Some(401)
    );
}

#[tokio::test]
async fn query_parameters_and_path_segments_are_encoded() {
    let app = Router::new().route(
        "/projects",
        get(|uri: axum::http::Uri| async move {
            assert_eq!(uri.query(), Some("cursor=a+b%26c&limit=5"));
            json!({"items": [], "next": null}).to_string()
        }),
    );
    let base = serve(app).await;
    let api = Client::with_token(&base, "t").unwrap();
    let page = api
        .projects(&PageQuery {
            cursor: Some("a b&c".into()),
            limit: Some(5),
        })
        .await
        .unwrap();
    assert!(page.items.is_empty() && page.next.is_none());
}

// --- Webhook verification ---------------------------------------------------------------

struct Signed {
    headers: HeaderMap,
    body: Vec<u8>,
    keys: JwkSet,
    secret: WebhookSecret,
    now: SystemTime,
}

fn signed_webhook() -> Signed {
    let now = Timestamp::now();
    let signer = Signer::from_keys(&[StoredKey::generate("k1".into(), now).unwrap()]).unwrap();
    let keys: JwkSet = serde_json::from_value(signer.jwks()).unwrap();
    let body = serde_json::to_vec(&json!({"id": "wh_1", "type": "prices.updated",
        "apiVersion": "3.1.0", "createdAt": now, "projectId": "shop", "subscriptionId": "sub_1",
        "instanceId": "gig", "data": {"prices": []}}))
    .unwrap();
    let date = http_date(now);
    let ts = now.millis().div_euclid(1000);
    let (der, kid) = signer.sign_der(&signing_input("POST", "/in/hook?a=1", &date, &body), now);
    let secret = WebhookSecret::generate();
    let mut headers = HeaderMap::new();
    let mut put = |k: &'static str, v: String| {
        headers.insert(k, HeaderValue::from_str(&v).unwrap());
    };
    put("date", date);
    put(
        "x-signature-secp256r1-sha256",
        der.iter().map(|b| format!("{b:02x}")).collect(),
    );
    put("x-signature-key-id", kid);
    put("webhook-id", "wh_1".into());
    put("webhook-timestamp", ts.to_string());
    put("webhook-signature", secret.sign("wh_1", ts, &body));
    Signed {
        headers,
        body,
        keys,
        secret,
        now: SystemTime::now(),
    }
}

#[test]
fn both_webhook_signatures_verify_and_a_tampered_webhook_is_refused() {
    let s = signed_webhook();
    let verifier = WebhookVerifier::new(&s.keys)
        .unwrap()
        .with_secret(s.secret.clone());
    let envelope = verifier
        .verify_at("POST", "/in/hook?a=1", &s.headers, &s.body, s.now)
        .unwrap();
    assert_eq!(envelope.id, "wh_1");
    assert_eq!(envelope.project_id, "shop");
    assert_eq!(envelope.subscription_id.as_deref(), Some("sub_1"));

    // A changed body fails the service signature, and the subscription one on its own.
    let mut tampered = s.body.clone();
    tampered[10] ^= 1;
    assert_eq!(
        verifier.verify_at("POST", "/in/hook?a=1", &s.headers, &tampered, s.now),
        Err(VerifyError::ServiceSignature)
    );
    assert_eq!(
        verifier.verify_subscription_signature(&s.headers, &tampered),
        Err(VerifyError::SubscriptionSignature)
    );
    // Another path, another key id.
    assert_eq!(
        verifier.verify_at("POST", "/in/hook?a=2", &s.headers, &s.body, s.now),
        Err(VerifyError::ServiceSignature)
    );
    let mut other_kid = s.headers.clone();
    other_kid.insert("x-signature-key-id", HeaderValue::from_static("k9"));
    assert_eq!(
        verifier.verify_at("POST", "/in/hook?a=1", &other_kid, &s.body, s.now),
        Err(VerifyError::UnknownKey("k9".into()))
    );
    // Another subscription's secret: the service signature holds, the webhook is refused.
    let stranger = WebhookVerifier::new(&s.keys)
        .unwrap()
        .with_secret(WebhookSecret::generate());
    assert!(
        stranger
            .verify_service_signature("POST", "/in/hook?a=1", &s.headers, &s.body)
            .is_ok()
    );
    assert_eq!(
        stranger.verify_at("POST", "/in/hook?a=1", &s.headers, &s.body, s.now),
        Err(VerifyError::SubscriptionSignature)
    );
    // During a rotation either secret verifies.
    let rotating = WebhookVerifier::new(&s.keys)
        .unwrap()
        .with_secret(WebhookSecret::generate())
        .with_secret(WebhookSecret::parse(&s.secret.reveal()).unwrap());
    assert!(
        rotating
            .verify_at("POST", "/in/hook?a=1", &s.headers, &s.body, s.now)
            .is_ok()
    );
    // Replayed an hour later.
    assert_eq!(
        verifier.verify_at(
            "POST",
            "/in/hook?a=1",
            &s.headers,
            &s.body,
            s.now + Duration::from_secs(3600)
        ),
        Err(VerifyError::Stale("date"))
    );
    // No signature at all.
    let mut unsigned = s.headers.clone();
    unsigned.remove("webhook-signature");
    assert_eq!(
        verifier.verify_at("POST", "/in/hook?a=1", &unsigned, &s.body, s.now),
        Err(VerifyError::MissingHeader("webhook-signature"))
    );
}

/// The service signature headers of a webhook `body` to `/in/hook` dated `at`.
fn service_signed(signer: &Signer, at: Timestamp, body: &[u8]) -> HeaderMap {
    let date = http_date(at);
    let (der, kid) = signer.sign_der(&signing_input("POST", "/in/hook", &date, body), at);
    let mut headers = HeaderMap::new();
    headers.insert("date", HeaderValue::from_str(&date).unwrap());
    headers.insert(
        "x-signature-secp256r1-sha256",
        HeaderValue::from_str(&der.iter().map(|b| format!("{b:02x}")).collect::<String>()).unwrap(),
    );
    headers.insert("x-signature-key-id", HeaderValue::from_str(&kid).unwrap());
    headers
}

#[test]
fn a_retired_key_verifies_only_what_it_signed_before_it_stopped() {
    let t0 = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
    let at = |mins: i64| Timestamp::from_millis(t0.millis() + mins * 60_000).unwrap();
    let first = StoredKey::generate("k1".into(), t0).unwrap();
    let old = Signer::from_keys(std::slice::from_ref(&first)).unwrap();
    let body = br#"{"id": "wh_1"}"#;
    let before = service_signed(&old, at(60), body);
    // Rotated at 2 h: k1 stays listed, retired, and signed until 2 h 10 min.
    let keys = pricing_core::jws::rotate(
        &[first],
        StoredKey::generate("k2".into(), at(120)).unwrap(),
        at(120),
    );
    let published: JwkSet =
        serde_json::from_value(Signer::from_keys(&keys).unwrap().jwks()).unwrap();
    assert_eq!(
        published.keys[0].retired_at.as_deref(),
        Some("2026-01-01T02:00:00Z")
    );
    let verifier = WebhookVerifier::new(&published).unwrap();
    let check =
        |headers: &HeaderMap| verifier.verify_service_signature("POST", "/in/hook", headers, body);
    assert_eq!(check(&before), Ok(()));
    // k1 still signs for 10 minutes after it retired (a minute's slack for clocks)...
    assert_eq!(check(&service_signed(&old, at(130), body)), Ok(()));
    assert_eq!(check(&service_signed(&old, at(131), body)), Ok(()));
    // ...and after that a signature by it is not the service's (the key may have leaked).
    for mins in [132, 60 * 24 * 30] {
        assert_eq!(
            check(&service_signed(&old, at(mins), body)),
            Err(VerifyError::RetiredKey("k1".into()))
        );
    }
}
