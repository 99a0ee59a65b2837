//! The Lambda glue on the embedded adapters, driven by real event payloads from
//! infra/events/: API Gateway HTTP API v2 requests, SQS batches, the EventBridge schedule.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use axum::Router;
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Context, LambdaEvent, Service};
use pricing_api::auth::Authenticator;
use pricing_api::{App, Stores};
use pricing_core::ids::{InstanceId, InstanceKey, ProjectId, TenantId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::{Instance, Message, Project};
use pricing_core::ports::{EntryLog, InstanceStore, ProjectStore, StateStore, WorkQueue};
use pricing_core::process::Processor;
use pricing_core::state::Header;
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;
use pricing_lambda::auth::AuthorizerClaims;
use pricing_lambda::handlers::{scheduled_sweep, work_message};
use pricing_lambda::sqs::{handle_batch, handle_webhook_batch};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = format!("{}/../../infra/events/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn parts_of(event: &str) -> axum::http::request::Parts {
    let request = lambda_http::request::from_str(event).expect("an API Gateway v2 event");
    request.into_parts().0
}

#[test]
fn the_tenant_comes_from_the_authorizer_claims() {
    let parts = parts_of(&fixture("apigw-v2-submit-entries.json"));
    assert_eq!(
        AuthorizerClaims.authenticate(&parts).unwrap(),
        TenantId::from_claim("4s1k0r2l0e3example").unwrap()
    );
    // A `tenant` claim wins over `sub`.
    let mut event: Value = serde_json::from_str(&fixture("apigw-v2-submit-entries.json")).unwrap();
    event["requestContext"]["authorizer"]["jwt"]["claims"]["tenant"] = json!("acme");
    let parts = parts_of(&event.to_string());
    assert_eq!(
        AuthorizerClaims.authenticate(&parts).unwrap().as_str(),
        "acme"
    );
    // No authorizer context (a route without auth): 401.
    let parts = parts_of(&fixture("apigw-v2-health-no-auth.json"));
    assert!(AuthorizerClaims.authenticate(&parts).is_err());
}

async fn seeded() -> (EmbeddedStore, InstanceKey) {
    let store = EmbeddedStore::open_in_memory().unwrap();
    let key = InstanceKey::new(
        TenantId::from_claim("4s1k0r2l0e3example").unwrap(),
        ProjectId::parse("festival").unwrap(),
        InstanceId::parse("day-1").unwrap(),
    );
    let now = Timestamp::now();
    store
        .create_project(&Project {
            project_id: key.project_id.clone(),
            tenant: key.tenant.clone(),
            name: "Festival".into(),
            created_at: now,
        })
        .await
        .unwrap();
    store
        .create_instance(
            &Instance {
                tenant: key.tenant.clone(),
                project_id: key.project_id.clone(),
                instance_id: key.instance_id.clone(),
                name: String::new(),
                active: false,
                time_zone: None,
                deactivation_date: None,
                created_at: now,
                updated_at: now,
                deactivation_announced: Some(false),
            },
            &Header::default(),
        )
        .await
        .unwrap();
    (store, key)
}

fn router(store: &EmbeddedStore) -> Router {
    let key = StoredKey::generate("k".into(), Timestamp::now()).unwrap();
    let auth: Arc<dyn Authenticator> = Arc::new(AuthorizerClaims);
    let app = App::new(
        Stores {
            store: store.clone(),
            queue: store.clone(),
        },
        Arc::new(Signer::from_keys(&[key]).unwrap()),
        auth,
    );
    pricing_api::router(Arc::new(app))
}

/// Runs an API Gateway v2 event through lambda_http's adapter, as the runtime does.
async fn invoke(router: &Router, event: &str) -> Value {
    let request: LambdaRequest = serde_json::from_str(event).expect("a Lambda HTTP event");
    let mut adapter = Adapter::from(router.clone());
    let response = adapter
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .expect("the adapter answers");
    serde_json::to_value(&response).unwrap()
}

#[tokio::test]
async fn an_api_gateway_event_submits_entries_and_the_sqs_event_applies_them() {
    let (store, key) = seeded().await;
    let router = router(&store);
    let response = invoke(&router, &fixture("apigw-v2-submit-entries.json")).await;
    assert_eq!(response["statusCode"], 200, "{response}");
    assert_eq!(response["headers"]["api-version"], "3.1.0");
    let body: Value = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["accepted"], 1);

    // The wake-up went to the queue; the fixture SQS event carries the same message.
    let received = store
        .receive(10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].message,
        Message::ProcessInstance { key: key.clone() }
    );
    let event: SqsEvent = serde_json::from_str(&fixture("sqs-process-instance.json")).unwrap();
    let processor = Processor::new();
    let result = handle_batch(event.clone(), |m| {
        work_message(&processor, &store, &store, m)
    })
    .await;
    assert!(result.batch_item_failures.is_empty());
    let state = store.load_state(&key).await.unwrap();
    assert_eq!(state.header.applied_seq, 1);
    assert!(
        state
            .products
            .contains_key(&pricing_core::ids::ProductId::parse("ga").unwrap())
    );

    // A redelivered (duplicated) message changes nothing.
    let before = store.load_state(&key).await.unwrap();
    let fresh = Processor::new();
    let result = handle_batch(event, |m| work_message(&fresh, &store, &store, m)).await;
    assert!(result.batch_item_failures.is_empty());
    assert_eq!(store.load_state(&key).await.unwrap(), before);
    assert_eq!(store.last_sequence(&key).await.unwrap(), 1);
}

#[tokio::test]
async fn failed_and_unreadable_messages_are_reported_not_swallowed() {
    let mut event: SqsEvent = serde_json::from_str(&fixture("sqs-process-instance.json")).unwrap();
    let mut broken = event.records[0].clone();
    broken.message_id = Some("broken".into());
    broken.body = Some("{not json".into());
    event.records.push(broken);
    let result = handle_batch(event.clone(), |m| async move {
        Err::<(), String>(format!("cannot handle {m:?}"))
    })
    .await;
    let ids: Vec<&str> = result
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, vec!["5b7e2b1c-0f4e-4c1e-9a55-4f2f7c1d9e01", "broken"]);
    // With a working handler only the unreadable one fails.
    let result = handle_batch(event, |_m| async { Ok::<(), String>(()) }).await;
    let ids: Vec<&str> = result
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, vec!["broken"]);
}

#[tokio::test]
async fn the_schedule_event_runs_the_sweep() {
    let _event: EventBridgeEvent =
        serde_json::from_str(&fixture("eventbridge-schedule.json")).unwrap();
    let (store, key) = seeded().await;
    // An append whose wake-up was lost.
    store
        .append(
            &key,
            vec![pricing_core::model::NewEntry {
                transaction_id: None,
                received_at: Timestamp::now(),
                jwt: Signer::from_keys(&[
                    StoredKey::generate("k".into(), Timestamp::now()).unwrap()
                ])
                .unwrap()
                .sign_jws(
                    br#"{"type":"productRegistration","data":{"productId":"ga","capacity":1}}"#,
                ),
            }],
        )
        .await
        .unwrap();
    let report = scheduled_sweep(&store, &store).await.unwrap();
    assert_eq!(report.enqueued, 1);
    let received = store
        .receive(10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(received[0].message, Message::ProcessInstance { key });
}

/// Records what the webhook batch asks of the queue.
#[derive(Default)]
struct VisibilityLog(std::sync::Mutex<Vec<(String, std::time::Duration)>>);

impl WorkQueue for VisibilityLog {
    async fn send(&self, _: &Message) -> pricing_core::ports::StoreResult<()> {
        Ok(())
    }
    async fn receive(
        &self,
        _: usize,
        _: std::time::Duration,
    ) -> pricing_core::ports::StoreResult<Vec<pricing_core::ports::Received>> {
        Ok(Vec::new())
    }
    async fn ack(&self, _: &str) -> pricing_core::ports::StoreResult<()> {
        Ok(())
    }
    async fn retry_later(
        &self,
        receipt: &str,
        delay: std::time::Duration,
    ) -> pricing_core::ports::StoreResult<()> {
        self.0.lock().unwrap().push((receipt.to_owned(), delay));
        Ok(())
    }
}

#[tokio::test]
async fn webhook_batches_hide_retries_dead_letter_final_failures_and_report_both() {
    use pricing_core::webhooks::Settle;
    use std::time::Duration;
    let template: SqsEvent = serde_json::from_str(&fixture("sqs-process-instance.json")).unwrap();
    let mut event = SqsEvent::default();
    for (i, id) in ["done", "retry", "dead", "error", "unreadable"]
        .iter()
        .enumerate()
    {
        let mut r = template.records[0].clone();
        r.message_id = Some((*id).into());
        r.receipt_handle = Some(format!("receipt-{id}"));
        r.body = Some(if *id == "unreadable" {
            "{not json".into()
        } else {
            serde_json::to_string(&Message::Deliver {
                webhook_id: format!("wh_{i}"),
            })
            .unwrap()
        });
        event.records.push(r);
    }
    let queue = VisibilityLog::default();
    let result = handle_webhook_batch(event, &queue, |m| async move {
        let Message::Deliver { webhook_id } = m else {
            return Err("not a delivery".to_owned());
        };
        match webhook_id.as_str() {
            "wh_0" => Ok(Settle::Done),
            "wh_1" => Ok(Settle::RetryIn(Duration::from_secs(300))),
            "wh_2" => Ok(Settle::DeadLetter),
            _ => Err("the store is down".to_owned()),
        }
    })
    .await;
    let failed: Vec<&str> = result
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["retry", "dead", "error", "unreadable"]);
    assert_eq!(
        *queue.0.lock().unwrap(),
        [
            ("receipt-retry".to_owned(), Duration::from_secs(300)),
            ("receipt-dead".to_owned(), Duration::ZERO),
        ]
    );
}
