//! End to end on the AWS emulator: real API Gateway HTTP API v2 events through the
//! entries-api and management-api handlers (lambda_http's adapter over the shared router),
//! real SQS messages from the FIFO process queue into the entry-processor handler, the
//! scheduler's sweep, all on DynamoDB/SQS/Secrets Manager provisioned from template.yaml.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use aws_lambda_events::event::sqs::SqsEvent;
use axum::Router;
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Context, LambdaEvent, Service};
use pricing_aws::Config;
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId};
use pricing_core::model::NewEntry;
use pricing_core::ports::{EntryLog, EventStore, PriceStore};
use pricing_core::process::Processor;
use pricing_core::time::Timestamp;
use pricing_lambda::handlers::{scheduled_sweep, work_message};
use pricing_lambda::sqs::handle_batch;
use pricing_lambda::wiring::Aws;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../infra/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json")
}

/// An API Gateway v2 event for `method path?query` with `body`, authorized for `tenant`.
fn http_event(
    method: &str,
    path_and_query: &str,
    route: &str,
    body: Option<Value>,
    tenant: &str,
) -> String {
    let mut e = fixture("apigw-v2-submit-entries.json");
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    e["routeKey"] = json!(format!("{method} {route}"));
    e["requestContext"]["routeKey"] = e["routeKey"].clone();
    e["rawPath"] = json!(path);
    e["rawQueryString"] = json!(query);
    e["requestContext"]["http"]["method"] = json!(method);
    e["requestContext"]["http"]["path"] = json!(path);
    e["requestContext"]["authorizer"]["jwt"]["claims"]["tenant"] = json!(tenant);
    e["pathParameters"] = json!({});
    match body {
        Some(b) => e["body"] = json!(b.to_string()),
        None => {
            e["body"] = Value::Null;
            e["headers"]
                .as_object_mut()
                .expect("headers")
                .remove("content-type");
        }
    }
    e.to_string()
}

async fn invoke(router: &Router, event: String) -> (u16, Value) {
    let request: LambdaRequest = serde_json::from_str(&event).expect("a Lambda HTTP event");
    let response = Adapter::from(router.clone())
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .expect("the adapter answers");
    let v = serde_json::to_value(&response).expect("serializable");
    let status = v["statusCode"].as_u64().expect("status") as u16;
    let body = v["body"]
        .as_str()
        .map(|b| serde_json::from_str(b).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    (status, body)
}

/// Receives what the queue holds, as the Lambda event source mapping would, as an SqsEvent.
async fn poll_sqs(aws: &Aws, queue_url: &str) -> (SqsEvent, Vec<String>) {
    let client = aws_sdk_sqs::Client::new(&aws.sdk);
    let out = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(30)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .expect("receive");
    let mut records = Vec::new();
    let mut receipts = Vec::new();
    for m in out.messages() {
        let attributes: HashMap<String, String> = m
            .attributes()
            .map(|a| {
                a.iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        records.push(json!({
            "messageId": m.message_id(),
            "receiptHandle": m.receipt_handle(),
            "body": m.body(),
            "attributes": attributes,
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "awsRegion": "us-east-1",
        }));
        receipts.push(m.receipt_handle().unwrap_or_default().to_owned());
    }
    let event = serde_json::from_value(json!({ "Records": records })).expect("an SqsEvent");
    (event, receipts)
}

/// What the event source mapping does after the handler: delete the messages that did not fail.
async fn delete_succeeded(
    aws: &Aws,
    queue_url: &str,
    event: &SqsEvent,
    receipts: &[String],
    failed: &[String],
) {
    let client = aws_sdk_sqs::Client::new(&aws.sdk);
    for (record, receipt) in event.records.iter().zip(receipts) {
        if !failed.contains(&record.message_id.clone().unwrap_or_default()) {
            client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(receipt)
                .send()
                .await
                .expect("delete");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_flow_through_the_lambda_handlers_on_the_emulator() {
    let env = pricing_emulator::provision("lambda-e2e");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    // Serialized HTTP requests: moto's transactions are not safe under concurrency.
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    // The deployment's custom resource: the key-rotator stores the first key.
    aws.maintain_keys(None)
        .await
        .expect("the key-rotator bootstraps a key");
    // entries-api reads the signing keys; management-api the public keys only.
    let entries_api = aws.api_router().await.expect("entries-api cold start");
    let management_api = aws
        .management_router()
        .await
        .expect("management-api cold start");

    let (s, b) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects",
            "/{proxy+}",
            Some(json!({"projectId": "fest"})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects/fest/instances",
            "/{proxy+}",
            Some(json!({"instanceId": "day-1"})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let route = "/projects/{projectId}/instances/{instanceId}/entries";
    let entries = json!({"entries": [
        {"type": "productRegistration", "transactionId": "p", "data": {"productId": "ga", "capacity": 100}},
        {"type": "itemRegistration", "transactionId": "i", "data": {"itemId": "ga-1", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 90, "default": 40}}},
        {"type": "itemSale", "transactionId": "s1", "data": {"itemId": "ga-1", "quantity": 3, "price": 40}},
        {"type": "itemSale", "transactionId": "bad", "data": {"itemId": "ghost", "price": 40}},
    ]});
    let (s, b) = invoke(
        &entries_api,
        http_event(
            "POST",
            "/projects/fest/instances/day-1/entries",
            route,
            Some(entries.clone()),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["accepted"], 4);
    // Another tenant sees nothing.
    let (s, _) = invoke(
        &entries_api,
        http_event(
            "POST",
            "/projects/fest/instances/day-1/entries",
            route,
            Some(entries.clone()),
            "intruder",
        ),
    )
    .await;
    assert_eq!(s, 404);
    // The same request again: duplicates, silently.
    let (s, b) = invoke(
        &entries_api,
        http_event(
            "POST",
            "/projects/fest/instances/day-1/entries",
            route,
            Some(entries),
            "acme",
        ),
    )
    .await;
    assert_eq!((s, b["duplicates"].as_u64()), (200, Some(4)));

    // entry-processor on the real SQS messages.
    let processor = Processor::new();
    let (event, receipts) = poll_sqs(&aws, &aws.config.process_queue_url).await;
    assert!(!event.records.is_empty(), "the submit enqueued a wake-up");
    let response = handle_batch(event.clone(), |m| {
        work_message(&processor, &aws.store, &aws.queues, m)
    })
    .await;
    let failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    delete_succeeded(
        &aws,
        &aws.config.process_queue_url,
        &event,
        &receipts,
        &failed,
    )
    .await;

    let details_route = "/{proxy+}";
    let (s, details) = invoke(
        &management_api,
        http_event(
            "GET",
            "/projects/fest/instances/day-1",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{details}");
    assert_eq!(
        details["items"],
        json!([{"itemId": "ga-1", "productId": "ga", "dynamicPricing": true,
        "sold": 3, "reserved": 0, "available": 97, "oversold": 0}])
    );
    assert_eq!(
        details["processing"],
        json!({"appliedSequence": 4, "lastSequence": 4})
    );

    // The same SQS event delivered again (at-least-once) changes nothing.
    let fresh = Processor::new();
    let again = handle_batch(event, |m| work_message(&fresh, &aws.store, &aws.queues, m)).await;
    assert!(again.batch_item_failures.is_empty());
    let (_, details_again) = invoke(
        &management_api,
        http_event(
            "GET",
            "/projects/fest/instances/day-1",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(details_again["items"], details["items"]);

    // The log reads back through entries-api, signed with the published key.
    let (s, log) = invoke(
        &entries_api,
        http_event(
            "GET",
            "/projects/fest/instances/day-1/entries?after=2",
            route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{log}");
    assert_eq!(log["items"].as_array().map(Vec::len), Some(2));
    let (s, keys) = invoke(
        &management_api,
        http_event(
            "GET",
            "/webhooks/signatureVerificationKeys",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(keys["keys"].as_array().map(Vec::len), Some(1));

    // A lost wake-up: an append with no message. The scheduler's sweep finds it.
    let key = InstanceKey::new(
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("fest").expect("id"),
        InstanceId::parse("day-1").expect("id"),
    );
    let signer = aws.signer().await.expect("keys");
    aws.store
        .append(
            &key,
            vec![NewEntry {
                transaction_id: None,
                received_at: Timestamp::now(),
                jwt: signer.sign_jws(br#"{"type":"itemSale","data":{"itemId":"ga-1","price":40}}"#),
            }],
        )
        .await
        .expect("append");
    let report = scheduled_sweep(&aws.store, &aws.queues)
        .await
        .expect("sweep");
    assert!(report.enqueued >= 1);
    let (event, receipts) = poll_sqs(&aws, &aws.config.process_queue_url).await;
    let response = handle_batch(event.clone(), |m| {
        work_message(&processor, &aws.store, &aws.queues, m)
    })
    .await;
    assert!(response.batch_item_failures.is_empty());
    delete_succeeded(&aws, &aws.config.process_queue_url, &event, &receipts, &[]).await;
    let (_, details) = invoke(
        &management_api,
        http_event(
            "GET",
            "/projects/fest/instances/day-1",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(details["items"][0]["sold"], 4);
    assert_eq!(details["processing"]["appliedSequence"], 5);

    // Prices on demand: management-api enqueues on the recalc queue, the recalculator
    // handler calculates, instancePrices and priceHistory read the result.
    let (s, b) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects/fest/calculatePrices",
            details_route,
            Some(json!({"metadata": {"run": "e2e"}})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    let calculation = b["calculations"][0]["calculationId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let (event, receipts) = poll_sqs(&aws, &aws.config.recalc_queue_url).await;
    assert_eq!(event.records.len(), 1);
    let response = handle_batch(event.clone(), |m| {
        work_message(&processor, &aws.store, &aws.queues, m)
    })
    .await;
    assert!(response.batch_item_failures.is_empty());
    // Redelivered: the calculation is stored once.
    let again = handle_batch(event.clone(), |m| {
        work_message(&processor, &aws.store, &aws.queues, m)
    })
    .await;
    assert!(again.batch_item_failures.is_empty());
    delete_succeeded(&aws, &aws.config.recalc_queue_url, &event, &receipts, &[]).await;
    let (s, prices) = invoke(
        &management_api,
        http_event(
            "GET",
            "/projects/fest/instancePrices?instanceId=day-1",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{prices}");
    assert_eq!(prices["items"][0]["calculationId"], calculation.as_str());
    assert_eq!(prices["items"][0]["sequence"], 1);
    assert_eq!(prices["items"][0]["prices"][0]["itemId"], "ga-1");
    let (s, history) = invoke(
        &management_api,
        http_event(
            "GET",
            "/projects/fest/instances/day-1/items/ga-1/priceHistory",
            details_route,
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{history}");
    assert_eq!(history["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(history["items"][0]["trigger"], "request");
}

/// `/flaky` answers 503 (Retry-After: 1) to the first attempt of each webhook and 204 to
/// the next; `/fail` always 500. Every request is kept.
async fn start_receiver() -> (
    std::sync::Arc<std::sync::Mutex<Vec<(String, axum::http::HeaderMap, axum::body::Bytes)>>>,
    std::net::SocketAddr,
) {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    type Hits =
        std::sync::Arc<std::sync::Mutex<Vec<(String, axum::http::HeaderMap, axum::body::Bytes)>>>;
    let hits: Hits = Default::default();
    let state = hits.clone();
    let app = Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let hits = state.clone();
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let mut hits = hits.lock().unwrap();
                let before = hits
                    .iter()
                    .filter(|(_, h, _)| {
                        h.get("webhook-id").and_then(|v| v.to_str().ok()) == Some(&id)
                    })
                    .count();
                hits.push((uri.path().to_owned(), headers, body));
                match uri.path() {
                    "/flaky" if before == 0 => {
                        (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response()
                    }
                    "/flaky" => StatusCode::NO_CONTENT.into_response(),
                    _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (hits, addr)
}

/// The webhook lane as the event source mapping runs it: receive, handle, delete what
/// succeeded. Returns the number of messages received.
async fn deliver_once(
    aws: &Aws,
    transport: &pricing_http::HttpTransport,
    signer: &pricing_core::jws::Signer,
) -> usize {
    use pricing_lambda::handlers::webhook_message;
    use pricing_lambda::sqs::handle_webhook_batch;
    let url = aws.config.webhook_queue_url.clone();
    let (event, receipts) = poll_sqs(aws, &url).await;
    let n = event.records.len();
    let (store, queues) = (&aws.store, &aws.queues);
    let result = handle_webhook_batch(event.clone(), &queues.webhooks, |m| {
        webhook_message(store, queues, transport, signer, m)
    })
    .await;
    let failed: Vec<String> = result
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    delete_succeeded(aws, &url, &event, &receipts, &failed).await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_flow_through_the_delivery_handler_on_the_emulator() {
    use pricing_core::ids::SubscriptionId;
    use pricing_core::ports::{DeliveryStore, Enqueue, SubscriptionStore};
    use pricing_core::webhooks::{
        AttemptUpdate, CallbackPolicy, Delivery, DeliveryStatus, NewSubscription, WebhookSecret,
        delivery::Attempt,
    };

    let env = pricing_emulator::provision("lambda-hooks");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None)
        .await
        .expect("the key-rotator bootstraps a key");
    let api = aws.management_router().await.expect("cold start");
    let entries_api = aws.api_router().await.expect("cold start");
    let keys = aws.keys().await.expect("keys");
    // The function uses the strict policy; the receiver here is on loopback.
    let transport = pricing_http::HttpTransport::new(CallbackPolicy::LOCAL).unwrap();
    let (hits, addr) = start_receiver().await;

    for (path, body) in [
        ("/projects", json!({"projectId": "hooks"})),
        ("/projects/hooks/instances", json!({"instanceId": "day-1"})),
    ] {
        let (s, b) = invoke(
            &api,
            http_event("POST", path, "/{proxy+}", Some(body), "acme"),
        )
        .await;
        assert_eq!(s, 201, "{b}");
    }
    let project = pricing_core::ids::ProjectKey::new(
        pricing_core::ids::TenantId::from_claim("acme").unwrap(),
        ProjectId::parse("hooks").unwrap(),
    );
    let now = Timestamp::now();
    // Stored directly: the API's strict policy refuses loopback callback URLs.
    let subscribe = |path: &str| {
        NewSubscription::parse(
            &json!({"callbackUrl": format!("http://{addr}{path}"), "events": ["entries.rejected"]}),
            &CallbackPolicy::LOCAL,
        )
        .unwrap()
        .into_subscription(project.clone(), None, now)
    };
    let flaky = subscribe("/flaky");
    assert!(aws.store.create_subscription(&flaky, 20).await.unwrap());

    // Through the API on DynamoDB: the signing secret is in the creation response and a
    // rotation's only, and stored (no events of this type come in this test).
    let (s, created) = invoke(
        &api,
        http_event(
            "POST",
            "/projects/hooks/subscriptions",
            "/{proxy+}",
            Some(json!({"callbackUrl": "https://hooks.example.com/in",
                        "events": ["instance.deactivated"]})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let created_secret = created["secret"].as_str().unwrap().to_owned();
    let api_sub = SubscriptionId::parse(created["subscriptionId"].as_str().unwrap()).unwrap();
    let stored_secrets = |id: SubscriptionId| {
        let (store, project) = (&aws.store, project.clone());
        async move {
            store
                .get_subscription(&project, &id)
                .await
                .unwrap()
                .unwrap()
                .secrets
                .unwrap()
        }
    };
    assert_eq!(
        Some(stored_secrets(api_sub.clone()).await.current),
        WebhookSecret::parse(&created_secret),
        "the secret shown is stored in DynamoDB"
    );
    let (s, listing) = invoke(
        &api,
        http_event(
            "GET",
            "/projects/hooks/subscriptions",
            "/{proxy+}",
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{listing}");
    assert_eq!(listing["items"].as_array().unwrap().len(), 2);
    assert!(
        !listing.to_string().contains("secret"),
        "a listing shows no secret: {listing}"
    );
    let (s, rotated) = invoke(
        &api,
        http_event(
            "POST",
            &format!("/projects/hooks/subscriptions/{api_sub}/secret"),
            "/{proxy+}",
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap();
    assert_ne!(new_secret, created_secret);
    let after = stored_secrets(api_sub.clone()).await;
    assert_eq!(Some(after.current), WebhookSecret::parse(new_secret));
    assert_eq!(after.previous, WebhookSecret::parse(&created_secret));
    let (s, _) = invoke(
        &api,
        http_event(
            "POST",
            &format!("/projects/hooks/subscriptions/{api_sub}/secret"),
            "/{proxy+}",
            None,
            "intruder",
        ),
    )
    .await;
    assert_eq!(s, 404, "another tenant cannot rotate it");

    // A rejected entry, processed by the entry-processor handler.
    let (s, b) = invoke(
        &entries_api,
        http_event(
            "POST",
            "/projects/hooks/instances/day-1/entries",
            "/projects/{projectId}/instances/{instanceId}/entries",
            Some(json!({"entries": [
                {"type": "itemSale", "transactionId": "bad", "data": {"itemId": "ghost", "price": 40}},
            ]})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let processor = Processor::new();
    let (event, receipts) = poll_sqs(&aws, &aws.config.process_queue_url).await;
    assert_eq!(event.records.len(), 1);
    let (store, queues) = (&aws.store, &aws.queues);
    let result = handle_batch(event.clone(), |m| {
        work_message(&processor, store, queues, m)
    })
    .await;
    assert!(result.batch_item_failures.is_empty());
    delete_succeeded(&aws, &aws.config.process_queue_url, &event, &receipts, &[]).await;

    // First attempt: 503 with Retry-After: 1 hides the message for the schedule's first
    // delay, 5 s +-10 % (a Retry-After lengthens the schedule's delay, never shortens it).
    // Timed from before the attempt, so that a slow answer to a later receive cannot
    // shorten what is measured.
    let waited = std::time::Instant::now();
    assert_eq!(deliver_once(&aws, &transport, &keys.signer).await, 1);
    assert_eq!(hits.lock().unwrap().len(), 1);
    assert_eq!(
        deliver_once(&aws, &transport, &keys.signer).await,
        0,
        "hidden until the retry is due"
    );
    // Polled: the retry shows once its delay has passed (5.5 s at most), and a loaded
    // machine may take a little longer to show it.
    while hits.lock().unwrap().len() < 2 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(30),
            "the retry never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        deliver_once(&aws, &transport, &keys.signer).await;
    }
    assert!(
        waited.elapsed() >= std::time::Duration::from_millis(4_000),
        "the retry came before the schedule's 5 s (+-10 %): {:?}",
        waited.elapsed()
    );
    let got = hits.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    let id = |h: &axum::http::HeaderMap| h["webhook-id"].to_str().unwrap().to_owned();
    assert_eq!(
        id(&got[0].1),
        id(&got[1].1),
        "the retry keeps the webhook id"
    );
    let body: Value = serde_json::from_slice(&got[1].2).unwrap();
    assert_eq!(body["type"], "entries.rejected");
    assert_eq!(body["data"]["errors"][0]["transactionId"], "bad");
    // The signature verifies with the published key.
    let headers = &got[1].1;
    let mut message = b"POST/flaky".to_vec();
    message.extend(headers["date"].as_bytes());
    message.extend(&got[1].2);
    let hex = headers["x-signature-secp256r1-sha256"].to_str().unwrap();
    let signature: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let kid = headers["x-signature-key-id"].to_str().unwrap();
    assert!(keys.signer.verify_der(kid, &message, &signature));
    // The envelope names its project and subscription, and the subscription's own
    // signature verifies under its secret, not under another subscription's.
    assert_eq!(body["projectId"], "hooks");
    assert_eq!(body["subscriptionId"], flaky.subscription_id.as_str());
    let v1 = headers["webhook-signature"].to_str().unwrap();
    let timestamp: i64 = headers["webhook-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let verifies = |secret: &WebhookSecret| secret.verifies(v1, &id(headers), timestamp, &got[1].2);
    assert!(verifies(&flaky.secrets.as_ref().unwrap().current));
    let stranger = subscribe("/stranger");
    assert!(!verifies(&stranger.secrets.as_ref().unwrap().current));
    assert!(!verifies(&stored_secrets(api_sub).await.current));
    let delivery = aws.store.get_delivery(&id(headers)).await.unwrap().unwrap();
    assert_eq!(
        (delivery.status, delivery.attempt),
        (DeliveryStatus::Succeeded, 2)
    );

    // A delivery on its last attempt: the failure ends in the dead-letter queue.
    let failing = subscribe("/fail");
    assert!(aws.store.create_subscription(&failing, 20).await.unwrap());
    let event = pricing_core::model::Event {
        id: "evt_last".into(),
        event_type: "entries.rejected".into(),
        project_id: project.project_id.clone(),
        instance_id: InstanceId::parse("day-1").unwrap(),
        created_at: now,
        data: json!({"errors": []}),
    };
    let d = Delivery::new(&event, &failing, now);
    let webhook_id = d.webhook_id.clone();
    aws.store.create_deliveries(&[d]).await.unwrap();
    for attempt in 1..=7 {
        let update = AttemptUpdate {
            attempt,
            status: DeliveryStatus::Retrying,
            response_status: Some(500),
            error: Some("the receiver answered 500".into()),
            attempted_at: now,
            next_attempt_at: Some(now),
            record: Attempt {
                attempt,
                attempted_at: now,
                response_status: Some(500),
                error: None,
                duration_ms: 1,
            },
        };
        assert!(
            aws.store
                .record_attempt(&webhook_id, &update)
                .await
                .unwrap()
        );
    }
    aws.queues
        .send(&pricing_core::model::Message::Deliver {
            webhook_id: webhook_id.clone(),
        })
        .await
        .unwrap();
    let sqs = aws_sdk_sqs::Client::new(&aws.sdk);
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&aws.config.webhook_queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap();
    let redrive: Value = serde_json::from_str(
        attrs.attributes().unwrap()[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy]
            .as_str(),
    )
    .unwrap();
    let dlq_name = redrive["deadLetterTargetArn"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let dlq = sqs
        .get_queue_url()
        .queue_name(dlq_name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let mut receives = 0;
    while deliver_once(&aws, &transport, &keys.signer).await > 0 {
        receives += 1;
        assert!(
            receives <= 12,
            "the message never reached the dead-letter queue"
        );
    }
    let dead = sqs.receive_message().queue_url(&dlq).send().await.unwrap();
    let bodies: Vec<&str> = dead.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert!(bodies[0].contains(&webhook_id));
    let fails = hits
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, _, _)| p == "/fail")
        .count();
    assert_eq!(
        fails, 1,
        "the last attempt is made once; redeliveries send nothing"
    );
    let d = aws.store.get_delivery(&webhook_id).await.unwrap().unwrap();
    assert_eq!((d.status, d.attempt), (DeliveryStatus::Failed, 8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_in_the_secret_and_warm_functions_publish_them() {
    let env = pricing_emulator::provision("lambda-keys");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    let day = std::time::Duration::from_secs(86_400);
    // The key-rotator's first run stores a key (nothing to rotate yet).
    let first_run = aws.maintain_keys(Some(90 * day)).await.unwrap();
    assert_eq!((first_run.kids.len(), first_run.rotated), (1, None));
    let keys = aws.keys().await.expect("cold start reads the key");
    let public = aws.public_keys().await.expect("management cold start");
    let first = keys.signer.kid();
    assert_eq!(first_run.kids, std::slice::from_ref(&first));
    assert_eq!(
        aws.maintain_keys(Some(90 * day)).await.unwrap().rotated,
        None,
        "not due"
    );
    let new = aws
        .maintain_keys(Some(std::time::Duration::ZERO))
        .await
        .unwrap()
        .rotated
        .expect("rotated");
    assert_ne!(new, first);
    keys.reload().await;
    public.reload().await;
    assert_eq!(
        public.keys.jwks(),
        keys.signer.jwks(),
        "the management API publishes the rotated set"
    );
    let published: Vec<(String, String)> = keys.signer.jwks()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kid"].as_str().unwrap().to_owned(),
                k["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        published,
        [
            (first.clone(), "retired".to_owned()),
            (new, "active".to_owned())
        ]
    );
    // The new key is published first; the retired one signs until it has propagated.
    assert_eq!(keys.signer.kid(), first);
    // A fresh cold start reads the same set.
    let other = aws.keys().await.unwrap();
    assert_eq!(other.signer.jwks(), keys.signer.jwks());
}

/// A CloudFormation custom resource request as the stack's SigningKeyBootstrap sends it,
/// answered at `response_url`.
fn custom_resource_request(request_type: &str, response_url: &str) -> Value {
    json!({
        "RequestType": request_type,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:pricing-KeyRotatorFunction",
        "ResponseURL": response_url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/pricing/0b8f2a1e",
        "RequestId": format!("{request_type}-1"),
        "ResourceType": "Custom::SigningKeys",
        "LogicalResourceId": "SigningKeyBootstrap",
        "ResourceProperties": {"ServiceToken": "arn", "SigningKeysSecret": "s"}
    })
}

/// Receives the custom resource responses (CloudFormation's pre-signed URL).
async fn start_response_receiver() -> (std::sync::Arc<std::sync::Mutex<Vec<Value>>>, String) {
    let got: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
    let state = got.clone();
    let app = Router::new().fallback(move |method: axum::http::Method, body: axum::body::Bytes| {
        let got = state.clone();
        async move {
            assert_eq!(method, axum::http::Method::PUT);
            got.lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap());
            axum::http::StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (got, format!("http://{addr}/response?X-Amz-Signature=abc"))
}

/// Issue 9, item 8: no function but the key-rotator writes the keys. At deploy the stack's
/// custom resource has it store the first key; the functions that read the keys fail
/// clearly until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_rotator_bootstraps_the_keys_through_the_custom_resource() {
    use pricing_lambda::rotator::{http_client, key_rotator};

    let env = pricing_emulator::provision("lambda-bootstrap");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);

    // Before the bootstrap: cold starts wait briefly, then fail naming the key-rotator.
    let err = aws.api_router().await.expect_err("no key yet");
    assert!(err.to_string().contains("key-rotator"), "{err}");
    let err = aws.management_router().await.expect_err("no key yet");
    assert!(err.to_string().contains("key-rotator"), "{err}");

    let http = http_client().unwrap();
    let (responses, url) = start_response_receiver().await;
    let answered = key_rotator(&aws, &http, None, &custom_resource_request("Create", &url))
        .await
        .expect("answered");
    let sent = responses.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0], answered);
    assert_eq!(sent[0]["Status"], "SUCCESS", "{}", sent[0]);
    assert_eq!(sent[0]["RequestId"], "Create-1");
    assert_eq!(sent[0]["LogicalResourceId"], "SigningKeyBootstrap");
    let kid = sent[0]["Data"]["Kids"].as_str().unwrap().to_owned();
    assert!(kid.starts_with('k'), "{kid}");

    // Now both kinds of cold start succeed, and publish the same key set.
    let keys = aws
        .keys()
        .await
        .expect("entries-api and webhook-delivery cold start");
    let public = aws.public_keys().await.expect("management-api cold start");
    assert_eq!(keys.signer.kid(), kid);
    assert_eq!(public.keys.jwks(), keys.signer.jwks());

    // A stack update and a stack delete change nothing; the physical id stays.
    let mut update = custom_resource_request("Update", &url);
    update["PhysicalResourceId"] = sent[0]["PhysicalResourceId"].clone();
    key_rotator(&aws, &http, None, &update).await.unwrap();
    let mut delete = custom_resource_request("Delete", &url);
    delete["PhysicalResourceId"] = sent[0]["PhysicalResourceId"].clone();
    key_rotator(&aws, &http, None, &delete).await.unwrap();
    let sent = responses.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|r| r["Status"] == "SUCCESS"), "{sent:?}");
    assert!(
        sent.iter()
            .all(|r| r["PhysicalResourceId"] == sent[0]["PhysicalResourceId"])
    );
    let again = aws.keys().await.unwrap();
    assert_eq!(again.signer.kid(), kid, "the key is kept");

    // The hourly schedule: nothing due.
    let scheduled = key_rotator(
        &aws,
        &http,
        Some(std::time::Duration::from_secs(86_400)),
        &fixture("eventbridge-schedule.json"),
    )
    .await
    .expect("a scheduled run");
    assert_eq!(scheduled["rotated"], Value::Null);
    assert_eq!(scheduled["kids"], json!([kid]));

    // A bootstrap that cannot work is answered FAILED (CloudFormation rolls back).
    let mut broken = aws.config.clone();
    broken.signing_keys_secret_id = "no-such-secret".into();
    let broken = Aws::with_sdk(broken, aws.sdk.clone());
    key_rotator(
        &broken,
        &http,
        None,
        &custom_resource_request("Create", &url),
    )
    .await
    .expect("answered");
    let last = responses.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last["Status"], "FAILED");
    assert!(
        last["Reason"].as_str().unwrap().contains("no-such-secret"),
        "{last}"
    );
}

/// Issue 9, item 8: the management API serves the key set from the public keys alone; it
/// works when the private secret is unreadable, and does not sign entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_needs_no_private_key() {
    let env = pricing_emulator::provision("lambda-public");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("bootstrap");
    let signer = aws.signer().await.expect("the signing keys");

    // The private keys become unreadable: the management API does not notice.
    aws_sdk_secretsmanager::Client::new(&aws.sdk)
        .put_secret_value()
        .secret_id(&aws.config.signing_keys_secret_id)
        .secret_string("not a key list")
        .send()
        .await
        .unwrap();
    assert!(aws.api_router().await.is_err(), "entries-api needs them");
    let management_api = aws
        .management_router()
        .await
        .expect("management-api cold start from the public keys");
    let (s, keys) = invoke(
        &management_api,
        http_event(
            "GET",
            "/webhooks/signatureVerificationKeys",
            "/{proxy+}",
            None,
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 200, "{keys}");
    assert_eq!(keys, signer.jwks());

    let (s, _) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects",
            "/{proxy+}",
            Some(json!({"projectId": "pub"})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 201);
    let (s, _) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects/pub/instances",
            "/{proxy+}",
            Some(json!({"instanceId": "i"})),
            "acme",
        ),
    )
    .await;
    assert_eq!(s, 201);
    let (s, body) = invoke(
        &management_api,
        http_event(
            "POST",
            "/projects/pub/instances/i/entries",
            "/{proxy+}",
            Some(json!({"entries": [{"type": "itemRemoval", "data": {"itemId": "a"}}]})),
            "acme",
        ),
    )
    .await;
    assert_eq!(
        s, 404,
        "it has no entry routes (the gateway sends them to entries-api): {body}"
    );
}

/// The status, content type, `Allow` header and body of a Lambda HTTP response to `event`.
async fn answer(router: &Router, event: &str) -> (Value, Value, Value, Value) {
    let request: LambdaRequest = serde_json::from_str(event).expect("a Lambda HTTP event");
    let response = Adapter::from(router.clone())
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .expect("the adapter answers");
    let v = serde_json::to_value(&response).expect("serializable");
    let body = v["body"]
        .as_str()
        .map(|b| serde_json::from_str(b).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    (
        v["statusCode"].clone(),
        v["headers"]["content-type"].clone(),
        v["headers"]["allow"].clone(),
        body,
    )
}

/// Issue 12, item 6: `POST /simulations` has a function of its own (simulations-api), so
/// the management-api links no market simulator. Through API Gateway events on the
/// emulator, the function answers exactly what the whole API (the standalone's router)
/// answers: a report, each refusal, the token check and a wrong method; the management-api
/// no longer serves the path (the gateway routes it to the simulations function).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulations_are_answered_by_their_own_function() {
    use std::sync::Arc;

    use pricing_api::{App, Stores};
    use pricing_core::jws::{Signer, StoredKey};

    let env = pricing_emulator::provision("lambda-simulations");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("a first key");
    let simulations_api = aws
        .simulations_router()
        .await
        .expect("simulations-api cold start from the public keys");
    let management_api = aws.management_router().await.expect("management-api");
    let store = pricing_embedded::EmbeddedStore::open_in_memory().unwrap();
    let key = StoredKey::generate("k".into(), Timestamp::now()).unwrap();
    let whole = pricing_api::router(Arc::new(App::new(
        Stores {
            store: store.clone(),
            queue: store,
        },
        Arc::new(Signer::from_keys(&[key]).unwrap()),
        Arc::new(pricing_lambda::auth::AuthorizerClaims),
    )));

    let scenario = json!({
        "name": "lambda", "days": 5, "slotsPerDay": 12, "capacity": 30, "expectedSales": 0.9,
        "items": [{"itemId": "ga", "priceSettings": {"min": 20, "max": 100, "default": 50},
            "arrivals": 80, "shape": [[0, 1], [1, 2]],
            "willingnessToPay": {"type": "exponential", "mean": 40}}],
        "runs": 12, "seed": 3
    });
    let mut negative = scenario.clone();
    negative["capacity"] = json!(-1);
    let mut too_much = scenario.clone();
    too_much["runs"] = json!(1000);
    let mut no_token: Value = serde_json::from_str(&http_event(
        "POST",
        "/simulations",
        "/simulations",
        Some(scenario.clone()),
        "acme",
    ))
    .unwrap();
    no_token["requestContext"]
        .as_object_mut()
        .unwrap()
        .remove("authorizer");
    let report_event = http_event(
        "POST",
        "/simulations?models=pace,fixed",
        "/simulations",
        Some(scenario.clone()),
        "acme",
    );
    let cases = [
        ("a report", report_event.clone(), 200),
        (
            "the default models",
            http_event(
                "POST",
                "/simulations",
                "/simulations",
                Some(scenario.clone()),
                "acme",
            ),
            200,
        ),
        (
            "an invalid field",
            http_event(
                "POST",
                "/simulations",
                "/simulations",
                Some(negative),
                "acme",
            ),
            400,
        ),
        (
            "an unknown model",
            http_event(
                "POST",
                "/simulations?models=nope",
                "/simulations",
                Some(scenario.clone()),
                "acme",
            ),
            400,
        ),
        (
            "too much work",
            http_event(
                "POST",
                "/simulations",
                "/simulations",
                Some(too_much),
                "acme",
            ),
            422,
        ),
        (
            "no body",
            http_event("POST", "/simulations", "/simulations", None, "acme"),
            400,
        ),
        ("no token", no_token.to_string(), 401),
        (
            "a wrong method",
            http_event("GET", "/simulations", "/simulations", None, "acme"),
            405,
        ),
    ];
    for (case, event, status) in cases {
        let function = answer(&simulations_api, &event).await;
        assert_eq!(function.0, status, "{case}: {}", function.3);
        assert_eq!(function, answer(&whole, &event).await, "{case}");
    }
    let (_, _, _, report) = answer(&simulations_api, &report_event).await;
    let labels: Vec<&str> = report["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["pace", "fixed"]);
    assert_eq!(report["runs"], 12);

    // The management-api (behind the gateway's /{proxy+}) has no such route any more.
    let (s, body) = invoke(
        &management_api,
        http_event("POST", "/simulations", "/{proxy+}", Some(scenario), "acme"),
    )
    .await;
    assert_eq!(s, 404, "{body}");
}

/// Hands what `queue_url` holds to the handlers, as the event source mapping would, and
/// deletes what they did not fail; every message must succeed. Returns how many there were.
async fn drain(aws: &Aws, processor: &Processor, queue_url: &str) -> usize {
    let (event, receipts) = poll_sqs(aws, queue_url).await;
    let records = event.records.len();
    let response = handle_batch(event.clone(), |m| {
        work_message(processor, &aws.store, &aws.queues, m)
    })
    .await;
    let failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    delete_succeeded(aws, queue_url, &event, &receipts, &failed).await;
    records
}

/// An RFC 3339 time `days` (may be fractional or negative) after `t`.
fn days_after(t: Timestamp, days: f64) -> String {
    Timestamp::from_millis(t.millis() + (days * 86_400_000.0) as i64)
        .unwrap()
        .to_rfc3339()
}

/// The default model end to end on DynamoDB: a product without `pricingModel` is priced by
/// `revenue`, which learns from `itemSale` entries (strong early sales raise the price),
/// learns the booking curve of a later instance from the project's earlier one
/// (`past_products` on DynamoDB), and carries each item's exposure from one calculation
/// to the next through the stored latest prices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_revenue_model_learns_from_sales_and_from_other_instances() {
    let env = pricing_emulator::provision("lambda-revenue");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("bootstrap");
    let entries_api = aws.api_router().await.expect("entries-api cold start");
    let management_api = aws.management_router().await.expect("management-api");
    let manage = |method: &str, path: &str, body: Option<Value>| {
        invoke(
            &management_api,
            http_event(method, path, "/{proxy+}", body, "acme"),
        )
    };
    let (s, b) = manage("POST", "/projects", Some(json!({"projectId": "tour"}))).await;
    assert_eq!(s, 201, "{b}");
    let submit = |instance: &str, entries: Value| {
        let path = format!("/projects/tour/instances/{instance}/entries");
        let event = http_event(
            "POST",
            &path,
            "/projects/{projectId}/instances/{instanceId}/entries",
            Some(json!({ "entries": entries })),
            "acme",
        );
        invoke(&entries_api, event)
    };
    // Prices on demand: calculatePrices, then the recalculator handler (a cold start
    // each time: the previous prices and exposures come from DynamoDB); returns the item's
    // price as stored in the latest calculation (price, previousPrice, exposure) with the
    // explanation of its newest priceHistory entry if this calculation changed the price
    // (a calculation that leaves it as it was adds no history entry: explanation null).
    let calculate = async |instance: &str| {
        let (s, b) = manage(
            "POST",
            "/projects/tour/calculatePrices",
            Some(json!({"instanceIds": [instance]})),
        )
        .await;
        assert_eq!(s, 202, "{b}");
        let calculation = b["calculations"][0]["calculationId"].clone();
        let recalculator = Processor::new();
        assert_eq!(
            drain(&aws, &recalculator, &aws.config.recalc_queue_url).await,
            1
        );
        let path = format!("/projects/tour/instances/{instance}/items/hall-ga/priceHistory");
        let (s, history) = manage("GET", &path, None).await;
        assert_eq!(s, 200, "{history}");
        let newest = history["items"]
            .as_array()
            .unwrap()
            .iter()
            .max_by_key(|e| e["sequence"].as_u64())
            .cloned()
            .unwrap();
        let key = InstanceKey::new(
            pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
            ProjectId::parse("tour").unwrap(),
            InstanceId::parse(instance).unwrap(),
        );
        let latest = aws.store.latest_prices(&key).await.unwrap().unwrap();
        assert_eq!(json!(latest.calculation_id), calculation);
        let mut stored = serde_json::to_value(&latest.prices[0]).unwrap();
        stored["calculationId"] = calculation.clone();
        if newest["calculationId"] == calculation {
            assert_eq!(stored["price"], newest["price"]);
            stored["explanation"] = newest["explanation"].clone();
        } else {
            assert_eq!(
                stored["changed"], false,
                "a changed price has its history entry"
            );
            stored["explanation"] = Value::Null;
        }
        stored
    };
    let registrations = |start: &str, end: &str| {
        json!([
            {"type": "productRegistration", "transactionId": "p",
                "data": {"productId": "hall", "capacity": 200, "expectedSales": 0.9}},
            {"type": "itemRegistration", "transactionId": "i",
                "data": {"itemId": "hall-ga", "productId": "hall",
                "salesPeriod": {"start": start, "end": end},
                "priceSettings": {"min": 20, "max": 200, "default": 60}}},
        ])
    };
    let now = Timestamp::now();
    let processor = Processor::new();

    // Night 1: a 30-day sales period, a third gone; 150 of 200 units sold at the default
    // price in those ten days.
    let (s, b) = manage(
        "POST",
        "/projects/tour/instances",
        Some(json!({"instanceId": "night-1"})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let start = days_after(now, -10.0);
    let mut entries = registrations(&start, &days_after(now, 20.0));
    for day in 0..10 {
        entries.as_array_mut().unwrap().push(json!({
            "type": "itemSale", "transactionId": format!("s{day}"),
            "data": {"itemId": "hall-ga", "quantity": 15, "price": 60,
                "soldAt": days_after(now, f64::from(day) - 9.5)}
        }));
    }
    let (s, b) = submit("night-1", entries).await;
    assert_eq!((s, b["accepted"].as_u64()), (200, Some(12)), "{b}");
    assert!(drain(&aws, &processor, &aws.config.process_queue_url).await >= 1);

    let first = calculate("night-1").await;
    let model = &first["explanation"]["model"];
    assert_eq!(model["type"], "revenue", "{first}");
    for field in [
        "demandLevel",
        "priceResponse",
        "bidPrice",
        "expectedSales",
        "timeLeft",
        "demandObserved",
    ] {
        assert!(model[field].as_f64().is_some(), "{field}: {model}");
    }
    assert_eq!(model["unitsLeft"], 50, "{model}");
    assert_eq!(model["unitsObserved"], 150, "{model}");
    assert_eq!(model["curve"], "prior", "no other instance has sales yet");
    let price = first["price"].as_f64().unwrap();
    assert!(
        price > 60.0,
        "strong early sales raise the price: {price} ({model})"
    );
    assert!(model["bidPrice"].as_f64().unwrap() > 0.0, "{model}");
    assert!(model["demandLevel"].as_f64().unwrap() > 180.0, "{model}");
    assert!(first["exposure"]["levels"].is_array(), "{first}");
    // The calculation's prices.updated event carries the same price.
    let key = InstanceKey::new(
        pricing_core::ids::TenantId::from_claim("acme").expect("tenant"),
        ProjectId::parse("tour").unwrap(),
        InstanceId::parse("night-1").unwrap(),
    );
    let events = aws.store.list_events(&key, None, 100).await.unwrap();
    let updated: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "prices.updated")
        .collect();
    assert_eq!(updated.len(), 1, "{events:?}");
    assert_eq!(updated[0].data["calculationId"], first["calculationId"]);
    assert_eq!(updated[0].data["prices"][0]["price"], first["price"]);

    // Night 2 of the same tour, three days into its own 30-day period and no sales yet:
    // its booking curve is learned from night 1's product record.
    let (s, b) = manage(
        "POST",
        "/projects/tour/instances",
        Some(json!({"instanceId": "night-2"})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let entries = registrations(&days_after(now, -3.0), &days_after(now, 27.0));
    let (s, b) = submit("night-2", entries).await;
    assert_eq!((s, b["accepted"].as_u64()), (200, Some(2)), "{b}");
    assert!(drain(&aws, &processor, &aws.config.process_queue_url).await >= 1);

    let a = calculate("night-2").await;
    let model_a = a["explanation"]["model"].clone();
    assert_eq!(model_a["type"], "revenue", "{a}");
    assert_eq!(model_a["curve"], "learned", "{model_a}");
    assert_eq!(model_a["unitsObserved"], 0, "{model_a}");
    let observed_a = model_a["demandObserved"].as_f64().unwrap();
    assert!(observed_a > 0.0, "{model_a}");
    // Nothing carried yet: the exposure so far is at the default price.
    assert_eq!(a["exposure"]["levels"], json!([[60.0, observed_a]]), "{a}");

    // The next calculation starts from the exposure stored with the first one.
    let b = calculate("night-2").await;
    assert_eq!(b["previousPrice"], a["price"]);
    let model_b = &b["explanation"]["model"];
    if !model_b.is_null() {
        assert_eq!(model_b["curve"], "learned", "{model_b}");
        let observed_b = model_b["demandObserved"].as_f64().unwrap();
        assert!(observed_b >= observed_a, "{model_a} then {model_b}");
    }
    let levels = b["exposure"]["levels"].as_array().unwrap();
    assert_eq!(levels[0], json!([60.0, observed_a]), "carried: {b}");
    if a["price"].as_f64() != Some(60.0) && levels.len() > 1 {
        assert_eq!(levels[1][0], a["price"], "then at the first price: {b}");
    }
}

/// Issue 11, item 6: a calculation reflects every entry acknowledged before it was asked
/// for. On AWS the calculation travels on the recalc queue and the processing wake-up on
/// the FIFO process queue; here the recalculator handles its message before the entry
/// processor has seen the wake-up, and still prices the submitted state (it applies the
/// log tail first, conditionally, as any processor run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calculation_prices_every_entry_acknowledged_before_the_request() {
    let env = pricing_emulator::provision("lambda-calc-order");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("a first key");
    if let Ok(dir) = std::env::var("LAMBDA_BOOTSTRAPS") {
        cold_starts(&env, std::path::Path::new(&dir));
    }
    let entries_api = aws.api_router().await.expect("entries-api cold start");
    let management_api = aws.management_router().await.expect("management-api");
    let route = "/projects/{projectId}/instances/{instanceId}/entries";
    let call = |method: &'static str, path: &'static str, body: Option<Value>| {
        let router = if path.ends_with("/entries") {
            entries_api.clone()
        } else {
            management_api.clone()
        };
        let route = if path.ends_with("/entries") {
            route
        } else {
            "/{proxy+}"
        };
        async move { invoke(&router, http_event(method, path, route, body, "acme")).await }
    };
    let (s, b) = call("POST", "/projects", Some(json!({"projectId": "fest"}))).await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(
        "POST",
        "/projects/fest/instances",
        Some(json!({"instanceId": "day-1"})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let submit = |entries: Value| {
        call(
            "POST",
            "/projects/fest/instances/day-1/entries",
            Some(entries),
        )
    };
    let (s, b) = submit(json!({"entries": [
        {"type": "productRegistration", "transactionId": "p", "data": {"productId": "ga",
            "capacity": 100, "pricingModel": "fixed"}},
        {"type": "itemRegistration", "transactionId": "i", "data": {"itemId": "ga-1",
            "productId": "ga", "salesPeriod": {"start": "2026-01-01T00:00:00Z",
            "end": "2030-01-01T00:00:00Z"}, "priceSettings": {"min": 10, "max": 90, "default": 40}}},
    ]}))
    .await;
    assert_eq!(s, 200, "{b}");
    // The request comes right after the acknowledgement; the wake-up waits on its queue.
    let (s, b) = call("POST", "/projects/fest/calculatePrices", Some(json!({}))).await;
    assert_eq!(s, 202, "{b}");
    let processor = Processor::new();
    assert_eq!(
        drain(&aws, &processor, &aws.config.recalc_queue_url).await,
        1
    );
    let (s, prices) = call(
        "GET",
        "/projects/fest/instancePrices?instanceId=day-1",
        None,
    )
    .await;
    assert_eq!(s, 200, "{prices}");
    let priced = &prices["items"][0]["prices"];
    assert_eq!(
        (priced[0]["itemId"].as_str(), priced[0]["price"].as_f64()),
        (Some("ga-1"), Some(40.0)),
        "the calculation priced the registered item: {prices}"
    );
    let (_, details) = call("GET", "/projects/fest/instances/day-1", None).await;
    assert_eq!(
        details["processing"],
        json!({"appliedSequence": 2, "lastSequence": 2})
    );

    // A change of price settings, then a calculation on a fresh (cold) recalculator: the
    // new default is priced, not the one the warm state held.
    let (s, b) = submit(json!({"entries": [
        {"type": "itemProperties", "transactionId": "move", "data": {"itemId": "ga-1",
            "patch": [{"op": "replace", "path": "/priceSettings/default", "value": 55}]}},
    ]}))
    .await;
    assert_eq!(s, 200, "{b}");
    let (s, _) = call("POST", "/projects/fest/calculatePrices", Some(json!({}))).await;
    assert_eq!(s, 202);
    assert_eq!(
        drain(&aws, &Processor::new(), &aws.config.recalc_queue_url).await,
        1
    );
    let (_, prices) = call(
        "GET",
        "/projects/fest/instancePrices?instanceId=day-1",
        None,
    )
    .await;
    assert_eq!(
        prices["items"][0]["prices"][0]["price"].as_f64(),
        Some(55.0),
        "{prices}"
    );
    assert_eq!(prices["items"][0]["sequence"], 2);
    // The late wake-ups find nothing left to apply; the state stays as priced.
    assert!(drain(&aws, &processor, &aws.config.process_queue_url).await >= 1);
    let (_, details) = call("GET", "/projects/fest/instances/day-1", None).await;
    assert_eq!(
        details["processing"],
        json!({"appliedSequence": 3, "lastSequence": 3})
    );
}

/// The `p`-quantile of sorted durations, in milliseconds.
fn quantile_ms(sorted: &[std::time::Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn summary(name: &str, mut times: Vec<std::time::Duration>) {
    times.sort();
    let mean = times.iter().sum::<std::time::Duration>().as_secs_f64() * 1e3 / times.len() as f64;
    println!(
        "{name}: n {} p50 {:.2} ms p99 {:.2} ms mean {:.2} ms max {:.2} ms",
        times.len(),
        quantile_ms(&times, 0.5),
        quantile_ms(&times, 0.99),
        mean,
        quantile_ms(&times, 1.0),
    );
}

/// Issue 12, item 6 (a measurement, no assertion on time; docs/performance.md):
/// - warm: the time per handler invocation of entries-api (an API Gateway v2 event of a
///   one-entry submit, as the gateway sends it) and of the entry processor (the SQS event of
///   that submit's wake-up), on the emulator, after a warm-up; beside them the emulator's
///   own round trip (one DynamoDB GetItem), which dominates both;
/// - cold: with `LAMBDA_BOOTSTRAPS=DIR` (bootstraps built with the deployed `lambda`
///   profile: `cargo build --profile lambda --target x86_64-unknown-linux-gnu -p ...`),
///   each function's binary is started with the provisioned environment, and its
///   `cold start initialized` line (init_us) and the wall time from exec to it are read.
///
/// `cargo test --release -p pricing-lambda --test lambda_e2e lambda_invocation_times -- --ignored --nocapture`
/// (`TIMING_INVOCATIONS`, default 300).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it by name with --ignored --nocapture"]
async fn lambda_invocation_times() {
    use std::time::Instant;
    let n: usize = std::env::var("TIMING_INVOCATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let env = pricing_emulator::provision("lambda-timing");
    let config = Config::from_map(&env).expect("the provisioned environment is complete");
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.expect("a first key");
    if let Ok(dir) = std::env::var("LAMBDA_BOOTSTRAPS") {
        cold_starts(&env, std::path::Path::new(&dir));
    }
    let entries_api = aws.api_router().await.expect("entries-api cold start");
    let management_api = aws.management_router().await.expect("cold start");
    for (path, body) in [
        ("/projects", json!({"projectId": "speed"})),
        ("/projects/speed/instances", json!({"instanceId": "i"})),
    ] {
        let (s, b) = invoke(
            &management_api,
            http_event("POST", path, "/{proxy+}", Some(body), "acme"),
        )
        .await;
        assert_eq!(s, 201, "{b}");
    }
    let route = "/projects/{projectId}/instances/{instanceId}/entries";
    let submit = |body: Value| {
        invoke(
            &entries_api,
            http_event(
                "POST",
                "/projects/speed/instances/i/entries",
                route,
                Some(body),
                "acme",
            ),
        )
    };
    let (s, b) = submit(json!({"entries": [
        {"type": "productRegistration", "transactionId": "p", "data": {"productId": "ga", "capacity": 1000000}},
        {"type": "itemRegistration", "transactionId": "r", "data": {"itemId": "ga-1", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 90, "default": 40}}},
    ]}))
    .await;
    assert_eq!(s, 200, "{b}");
    let sale = |k: usize| {
        json!({"entries": [{"type": "itemSale", "transactionId": format!("s{k}"),
        "data": {"itemId": "ga-1", "price": 40}}]})
    };
    let processor = Processor::new();
    let queue = aws.config.process_queue_url.clone();
    drain(&aws, &processor, &queue).await;

    let mut emulator = Vec::with_capacity(n);
    let mut api = Vec::with_capacity(n);
    let mut process = Vec::with_capacity(n);
    let key = InstanceKey::new(
        pricing_core::ids::TenantId::from_claim("acme").unwrap(),
        ProjectId::parse("speed").unwrap(),
        InstanceId::parse("i").unwrap(),
    );
    let warm_up = 20;
    for k in 0..n + warm_up {
        let t = Instant::now();
        pricing_core::ports::InstanceStore::get_instance(&aws.store, &key)
            .await
            .unwrap();
        let round_trip = t.elapsed();
        let t = Instant::now();
        let (s, b) = submit(sale(k)).await;
        let submitted = t.elapsed();
        assert_eq!(s, 200, "{b}");
        let (event, receipts) = poll_sqs(&aws, &queue).await;
        assert!(!event.records.is_empty(), "the submit's wake-up");
        let t = Instant::now();
        let response = handle_batch(event.clone(), |m| {
            work_message(&processor, &aws.store, &aws.queues, m)
        })
        .await;
        let processed = t.elapsed();
        assert!(response.batch_item_failures.is_empty());
        delete_succeeded(&aws, &queue, &event, &receipts, &[]).await;
        if k >= warm_up {
            emulator.push(round_trip);
            api.push(submitted);
            process.push(processed);
        }
    }
    summary("emulator round trip (GetItem)", emulator);
    summary("entries-api, one-entry submit", api);
    summary("entry-processor, one wake-up", process);
}

/// The line without its terminal colour sequences (`ESC [ ... letter`): the runtime's text
/// logs colour the field names, and the digits of those sequences are not the value.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Starts each bootstrap under `dir` with the provisioned environment and reports its
/// cold start: the `init_us` it logs and the wall time from exec to that line. The
/// runtime API address is closed, so each exits once initialized.
fn cold_starts(env: &HashMap<String, String>, dir: &std::path::Path) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Instant;
    for function in [
        "entries-api",
        "management-api",
        "simulations-api",
        "entry-processor",
        "scheduler",
    ] {
        let path = dir.join(function);
        if !path.exists() {
            println!("{function}: no {}", path.display());
            continue;
        }
        let mut inits = Vec::new();
        let mut walls = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let mut child = Command::new(&path)
                .envs(env)
                .env("AWS_ENDPOINT_URL", pricing_emulator::endpoint())
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9")
                .env("AWS_LAMBDA_FUNCTION_NAME", function)
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
                .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
                .env("AWS_LAMBDA_LOG_STREAM_NAME", "timing")
                .env("AWS_LAMBDA_LOG_GROUP_NAME", "timing")
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start the bootstrap");
            let out = BufReader::new(child.stdout.take().unwrap());
            let mut found = None;
            for line in out.lines().map_while(Result::ok) {
                let line = strip_ansi(&line);
                if let Some(at) = line.find("init_us") {
                    let digits: String = line[at + 7..]
                        .chars()
                        .skip_while(|c| !c.is_ascii_digit())
                        .take_while(char::is_ascii_digit)
                        .collect();
                    found = digits.parse::<u64>().ok();
                    walls.push(started.elapsed());
                    break;
                }
            }
            let _ = child.kill();
            let _ = child.wait();
            match found {
                Some(us) => inits.push(std::time::Duration::from_micros(us)),
                None => {
                    let mut err = String::new();
                    let _ =
                        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
                    panic!("{function} logged no init_us: {err}");
                }
            }
        }
        summary(&format!("{function} cold init (init_us)"), inits);
        summary(&format!("{function} exec to initialized"), walls);
    }
}
