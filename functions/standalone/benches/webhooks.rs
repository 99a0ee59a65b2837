//! Signed webhook deliveries per second through the standalone delivery path: the durable
//! webhooks lane of the embedded queue, the delivery record, ES256 signing, a real HTTP
//! POST to a loopback receiver, the attempt record and the acknowledgement.
//!
//! `cargo bench -p standalone --bench webhooks` (env `DELIVERIES`, `CONCURRENCY`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use pricing_core::ids::{InstanceId, ProjectId, ProjectKey, TenantId};
use pricing_core::jws::{Signer, StoredKey};
use pricing_core::model::{Event, Message};
use pricing_core::ports::{DeliveryStore, Enqueue, SubscriptionStore};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::{CallbackPolicy, Delivery, NewSubscription};
use pricing_embedded::EmbeddedStore;
use pricing_http::HttpTransport;
use serde_json::json;
use tokio::sync::watch;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let total = env_or("DELIVERIES", 20_000);
    let concurrency = env_or("CONCURRENCY", 64);
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("bench.db")).expect("store");
    let now = Timestamp::now();
    let project = ProjectId::parse("bench").expect("id");
    let owner = TenantId::from_claim("bench").expect("tenant");
    let subscription = NewSubscription::parse(
        &json!({"callbackUrl": format!("http://{addr}/hooks?src=bench")}),
        &CallbackPolicy::LOCAL,
    )
    .expect("subscription")
    .into_subscription(ProjectKey::new(owner, project.clone()), None, now);
    assert!(
        store
            .create_subscription(&subscription, 20)
            .await
            .expect("store subscription")
    );
    let prices: Vec<_> = (0..10)
        .map(|i| json!({"itemId": format!("item-{i}"), "price": 40.5, "previousPrice": 40, "changed": true}))
        .collect();
    let setup = Instant::now();
    for chunk in 0..total.div_ceil(500) {
        let deliveries: Vec<Delivery> = (chunk * 500..((chunk + 1) * 500).min(total))
            .map(|i| {
                let event = Event {
                    id: format!("evt_bench_{i}"),
                    event_type: "prices.updated".into(),
                    project_id: project.clone(),
                    instance_id: InstanceId::parse("gig").expect("id"),
                    created_at: now,
                    data: json!({"calculationId": "c1", "trigger": "request", "sequence": i,
                                 "part": 1, "parts": 1, "prices": prices}),
                };
                Delivery::new(&event, &subscription, now)
            })
            .collect();
        for webhook_id in store.create_deliveries(&deliveries).await.expect("create") {
            store
                .send(&Message::Deliver { webhook_id })
                .await
                .expect("enqueue");
        }
    }
    println!(
        "set up {total} deliveries in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    let signer = Arc::new(
        Signer::from_keys(&[StoredKey::generate("bench".into(), now).expect("key")])
            .expect("signer"),
    );
    // As `serve` builds it: one destination (the bench's one receiver) holds at most a
    // quarter of the pool.
    let transport = Arc::new(
        HttpTransport::builder(CallbackPolicy::LOCAL)
            .places(standalone::serve::places_per_destination(concurrency))
            .build()
            .expect("transport"),
    );
    let (stop, stopped) = watch::channel(false);
    let started = Instant::now();
    let pool = tokio::spawn(standalone::webhooks::run(
        store.clone(),
        transport,
        signer,
        concurrency,
        stopped,
    ));
    while received.load(Ordering::Relaxed) < total {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "deliveries stalled at {}",
            received.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    let _ = pool.await;
    println!(
        "{total} signed deliveries with {concurrency} in flight: {:.2} s, {:.0} deliveries/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
}
