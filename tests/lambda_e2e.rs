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
use pricing_core::ports::EntryLog;
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
    // Two cold starts (entries-api and management-api) agree on the bootstrapped key.
    let entries_api = aws.api_router().await.expect("entries-api cold start");
    let management_api = aws.api_router().await.expect("management-api cold start");

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
