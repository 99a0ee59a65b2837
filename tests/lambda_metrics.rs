//! The functions' metrics on the AWS emulator (issue 13, item 1): a real flow through the
//! Lambda handlers (entries-api, entry-processor, recalculator, webhook-delivery,
//! scheduler) writes CloudWatch Embedded Metric Format lines at the end of each
//! invocation, with the same names and labels the standalone serves on `/metrics`.
//!
//! A test binary of its own: the metrics recorder is the process's (one per function
//! process on Lambda), so no other test may record into it.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::SqsEvent;
use axum::Router;
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Context, LambdaEvent, Service};
use pricing_aws::Config;
use pricing_core::process::Processor;
use pricing_lambda::handlers::{run_time, scheduler_run, webhook_batch, work_batch};
use pricing_lambda::wiring::Aws;
use serde_json::{Value, json};

/// What the functions write to stdout, kept in memory.
#[derive(Clone, Default)]
struct Out(Arc<Mutex<Vec<u8>>>);

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Out {
    /// The EMF documents written since the last call.
    fn take(&self) -> Vec<Value> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect()
    }
}

fn http_event(method: &str, path: &str, route: &str, body: Option<Value>) -> String {
    let file = format!(
        "{}/../../infra/events/apigw-v2-submit-entries.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut e: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    e["routeKey"] = json!(format!("{method} {route}"));
    e["requestContext"]["routeKey"] = e["routeKey"].clone();
    e["rawPath"] = json!(path);
    e["rawQueryString"] = json!("");
    e["requestContext"]["http"]["method"] = json!(method);
    e["requestContext"]["http"]["path"] = json!(path);
    e["requestContext"]["authorizer"]["jwt"]["claims"]["tenant"] = json!("acme");
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

/// One API Gateway invocation of an API function, as lambda_http runs it.
async fn invoke(router: &Router, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let request: LambdaRequest =
        serde_json::from_str(&http_event(method, path, "/{proxy+}", body)).unwrap();
    let response = Adapter::from(router.clone())
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .unwrap();
    let v = serde_json::to_value(&response).unwrap();
    let body = v["body"]
        .as_str()
        .map(|b| serde_json::from_str(b).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    (v["statusCode"].as_u64().unwrap() as u16, body)
}

/// What the queue holds, received as the event source mapping would, and deleted (the
/// handlers below must not fail any of it).
async fn take_sqs(aws: &Aws, queue_url: &str) -> SqsEvent {
    let client = aws_sdk_sqs::Client::new(&aws.sdk);
    let out = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(30)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let mut records = Vec::new();
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
            "messageId": m.message_id(), "receiptHandle": m.receipt_handle(),
            "body": m.body(), "attributes": attributes, "messageAttributes": {},
            "eventSource": "aws:sqs", "awsRegion": "us-east-1",
        }));
        client
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(m.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

/// Checks that `doc` is an EMF document as CloudWatch reads it, and returns its metrics as
/// `name{label=value,...}` -> value(s).
fn metrics_of(doc: &Value) -> BTreeMap<String, Value> {
    let directive = &doc["_aws"]["CloudWatchMetrics"][0];
    assert!(doc["_aws"]["Timestamp"].as_i64().unwrap() > 1_700_000_000_000);
    assert_eq!(directive["Namespace"], "Pricing/test", "{doc}");
    assert_eq!(doc["Function"], "metrics-test");
    let dimensions: Vec<&str> = directive["Dimensions"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let labels: Vec<String> = dimensions
        .iter()
        .map(|d| format!("{d}={}", doc[*d].as_str().expect("a dimension's value")))
        .collect();
    let mut out = BTreeMap::new();
    for m in directive["Metrics"].as_array().unwrap() {
        let name = m["Name"].as_str().unwrap();
        let unit = m["Unit"].as_str().unwrap();
        assert!(["Count", "Seconds"].contains(&unit), "{m}");
        let value = doc[name].clone();
        assert!(value.is_number() || value.is_array(), "{name}: {doc}");
        let key = if labels.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{}}}", labels.join(","))
        };
        out.insert(key, value);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handlers_write_their_metrics_as_emf() {
    let out = Out::default();
    assert!(pricing_lambda::metrics::install_to(
        "metrics-test",
        "Pricing/test",
        Box::new(out.clone())
    ));
    let env = pricing_emulator::provision("lambda-metrics");
    let config = Config::from_map(&env).unwrap();
    let sdk = pricing_aws::emulator::emulator_sdk_config(pricing_emulator::endpoint()).await;
    let aws = Aws::with_sdk(config, sdk);
    aws.maintain_keys(None).await.unwrap();
    let entries_api = aws.api_router().await.unwrap();
    let management_api = aws.management_router().await.unwrap();
    let keys = aws.keys().await.unwrap();

    for (path, body) in [
        ("/projects", json!({"projectId": "fest"})),
        ("/projects/fest/instances", json!({"instanceId": "day-1"})),
    ] {
        let (s, b) = invoke(&management_api, "POST", path, Some(body)).await;
        assert_eq!(s, 201, "{b}");
    }
    // Nothing recorded by these invocations: nothing written.
    assert_eq!(out.take(), Vec::<Value>::new());

    // A receiver on loopback, subscribed directly (the API's strict policy refuses it).
    let hits = Arc::new(Mutex::new(0));
    let counter = hits.clone();
    let receiver = Router::new().fallback(move || {
        *counter.lock().unwrap() += 1;
        async { axum::http::StatusCode::NO_CONTENT }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/ok", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });
    {
        use pricing_core::ports::SubscriptionStore;
        use pricing_core::webhooks::{CallbackPolicy, NewSubscription};
        let project = pricing_core::ids::ProjectKey::new(
            pricing_core::ids::TenantId::from_claim("acme").unwrap(),
            pricing_core::ids::ProjectId::parse("fest").unwrap(),
        );
        let sub = NewSubscription::parse(
            &json!({"callbackUrl": hook, "events": ["prices.updated"]}),
            &CallbackPolicy::LOCAL,
        )
        .unwrap()
        .into_subscription(project, None, pricing_core::time::Timestamp::now());
        assert!(aws.store.create_subscription(&sub, 20).await.unwrap());
    }

    // entries-api: 4 accepted, then 1 duplicate; each invocation writes its document.
    let sale = |tx: &str, item: &str| json!({"type": "itemSale", "transactionId": tx, "data": {"itemId": item, "quantity": 1, "price": 40}});
    let entries = "/projects/fest/instances/day-1/entries";
    let first = json!({"entries": [
        {"type": "productRegistration", "data": {"productId": "ga", "capacity": 100}},
        {"type": "itemRegistration", "data": {"itemId": "ga-1", "productId": "ga",
            "salesPeriod": {"start": "2026-01-01T00:00:00Z", "end": "2035-01-01T00:00:00Z"},
            "priceSettings": {"min": 10, "max": 90, "default": 40}}},
        sale("s1", "ga-1"),
        sale("bad", "ghost"),
    ]});
    let (s, b) = invoke(&entries_api, "POST", entries, Some(first)).await;
    assert_eq!((s, b["accepted"].as_u64()), (200, Some(4)), "{b}");
    let docs = out.take();
    assert_eq!(docs.len(), 1, "{docs:#?}");
    let m = metrics_of(&docs[0]);
    assert_eq!(m["pricing_entries_accepted_total"], json!(4));
    assert!(!m.contains_key("pricing_entries_duplicated_total"), "{m:?}");
    let key_age = m["pricing_signing_key_age_seconds"].as_f64().unwrap();
    assert!((0.0..3600.0).contains(&key_age), "{key_age}");
    let (s, b) = invoke(
        &entries_api,
        "POST",
        entries,
        Some(json!({"entries": [sale("s1", "ga-1")]})),
    )
    .await;
    assert_eq!((s, b["duplicates"].as_u64()), (200, Some(1)), "{b}");
    let m = metrics_of(&out.take()[0]);
    assert_eq!(m["pricing_entries_duplicated_total"], json!(1));
    assert!(!m.contains_key("pricing_entries_accepted_total"), "{m:?}");

    // entry-processor: 3 applied, 1 rejected (by its code, a document of its own), the
    // lag it found, the wait from receipt to application.
    let processor = Processor::new();
    let event = take_sqs(&aws, &aws.config.process_queue_url).await;
    assert!(!event.records.is_empty());
    let response = work_batch(&processor, &aws.store, &aws.queues, event, None).await;
    assert!(response.batch_item_failures.is_empty());
    let docs = out.take();
    let mut all = BTreeMap::new();
    for d in &docs {
        all.extend(metrics_of(d));
    }
    assert_eq!(docs.len(), 2, "{docs:#?}");
    assert_eq!(all["pricing_entries_applied_total"], json!(3));
    assert_eq!(
        all["pricing_entries_rejected_total{code=unknownItem}"],
        json!(1)
    );
    assert_eq!(all["pricing_processing_lag_entries"], json!(4.0));
    let latency = all["pricing_apply_latency_seconds"].as_array().unwrap();
    assert_eq!(latency.len(), 1);
    assert!(latency[0].as_f64().unwrap() >= 0.0);

    // calculatePrices through the management API; the recalculator stores the prices.
    let (s, b) = invoke(
        &management_api,
        "POST",
        "/projects/fest/calculatePrices",
        Some(json!({"instanceIds": ["day-1"]})),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(out.take(), Vec::<Value>::new());
    let event = take_sqs(&aws, &aws.config.recalc_queue_url).await;
    assert_eq!(event.records.len(), 1);
    let response = work_batch(&processor, &aws.store, &aws.queues, event, None).await;
    assert!(response.batch_item_failures.is_empty());
    let docs = out.take();
    let mut all = BTreeMap::new();
    for d in &docs {
        all.extend(metrics_of(d));
    }
    assert_eq!(all["pricing_calculations_total{trigger=request}"], json!(1));
    assert_eq!(
        all["pricing_prices_changed_total{trigger=request}"],
        json!(1)
    );
    let took = all["pricing_calculation_duration_seconds{trigger=request}"]
        .as_array()
        .unwrap();
    assert_eq!(took.len(), 1);
    // Nothing was waiting to be applied when it priced.
    assert_eq!(all["pricing_processing_lag_entries"], json!(0.0));

    // webhook-delivery: the prices.updated delivered on its first attempt.
    let event = take_sqs(&aws, &aws.config.webhook_queue_url).await;
    assert_eq!(event.records.len(), 1);
    let response = webhook_batch(&aws.store, &aws.queues, &transport(), &keys.signer, event).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(*hits.lock().unwrap(), 1);
    let docs = out.take();
    let mut all = BTreeMap::new();
    for d in &docs {
        all.extend(metrics_of(d));
    }
    assert_eq!(
        all["pricing_webhook_deliveries_total{outcome=succeeded}"],
        json!(1)
    );
    assert_eq!(
        all["pricing_webhook_attempt_duration_seconds"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(all.contains_key("pricing_signing_key_age_seconds"));

    // scheduler: the age of the oldest due delivery (none is due).
    let deadline = u64::try_from(pricing_core::time::Timestamp::now().millis()).unwrap() + 30_000;
    scheduler_run(&aws.store, &aws.queues, run_time(deadline))
        .await
        .unwrap();
    let docs = out.take();
    let mut all = BTreeMap::new();
    for d in &docs {
        all.extend(metrics_of(d));
    }
    assert_eq!(all["pricing_webhook_oldest_pending_seconds"], json!(0.0));
}

fn transport() -> pricing_http::HttpTransport {
    pricing_http::HttpTransport::new(pricing_core::webhooks::CallbackPolicy::LOCAL).unwrap()
}
