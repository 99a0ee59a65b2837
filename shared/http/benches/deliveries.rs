//! Deliveries per second from one transport to a loopback axum receiver, one at a time and
//! with 64 in flight. `cargo bench -p pricing-http --bench deliveries`

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pricing_core::ports::{WebhookRequest, WebhookTransport};
use pricing_core::webhooks::CallbackPolicy;
use pricing_core::webhooks::delivery::Response;
use pricing_http::HttpTransport;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// About one `prices.updated` part of a few dozen prices, with the signature headers.
fn request(addr: SocketAddr) -> WebhookRequest {
    let prices: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"itemId":"item-{i}","price":"12.50","previousPrice":"12.00","changed":true}}"#
            )
        })
        .collect();
    let body = format!(
        r#"{{"id":"01JABCDEF","type":"prices.updated","data":{{"prices":[{}]}}}}"#,
        prices.join(",")
    );
    WebhookRequest {
        url: format!("http://{addr}/hook"),
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("date", "Sun, 22 Nov 2026 10:00:00 GMT".to_owned()),
            ("x-signature-secp256r1-sha256", "30".repeat(71)),
            ("x-signature-key-id", "key-2026-11".to_owned()),
            ("webhook-id", "wh_01JABCDEF".to_owned()),
            ("webhook-timestamp", "1795341600".to_owned()),
        ],
        body: body.into_bytes(),
    }
}

async fn receiver() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("the receiver's address");
    let app = Router::new().route("/hook", post(|| async { StatusCode::NO_CONTENT }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn burst(transport: &HttpTransport, request: &WebhookRequest, n: usize) {
    let mut posts = JoinSet::new();
    for _ in 0..n {
        let transport = transport.clone();
        let request = request.clone();
        posts.spawn(async move { transport.post(request).await });
    }
    while let Some(done) = posts.join_next().await {
        let response = done.expect("a post task");
        assert!(
            matches!(response, Response::Status { status: 204, .. }),
            "{response:?}"
        );
    }
}

fn deliveries(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a tokio runtime");
    let addr = runtime.block_on(receiver());
    let transport = HttpTransport::builder(CallbackPolicy::LOCAL)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("transport");
    let request = request(addr);

    let mut group = c.benchmark_group("deliveries");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sequential", |b| {
        b.iter(|| runtime.block_on(transport.post(black_box(request.clone()))))
    });
    for concurrency in [32, 64] {
        group.throughput(Throughput::Elements(concurrency as u64));
        group.bench_function(format!("concurrent_{concurrency}"), |b| {
            b.iter(|| runtime.block_on(burst(&transport, &request, concurrency)))
        });
    }
    group.finish();
}

criterion_group!(benches, deliveries);
criterion_main!(benches);
