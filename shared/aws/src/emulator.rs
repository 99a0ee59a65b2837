//! SDK configuration for tests against a local AWS API emulator (moto server).
//!
//! moto handles requests on several threads without isolating them: a TransactWriteItems
//! checks each condition and writes item by item, and when it is cancelled it restores a
//! copy of the whole table taken at its start, undoing writes that other requests made
//! meanwhile. Concurrent requests to one table can therefore break the atomicity and
//! isolation that DynamoDB guarantees. [`emulator_sdk_config`] serializes the HTTP
//! requests of the process (one in flight at a time), which restores per-request
//! atomicity while the callers' operations still interleave request by request, as they
//! do against AWS.
//!
//! Stalled-stream protection is off: a request waiting for its turn does not read its
//! body, which the SDK would take for a stalled upload after 5 s (moto's transactions on a
//! large table take seconds each, and every suite at once queues many requests).

use std::sync::OnceLock;

use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::http::HttpRequest;
use aws_sdk_dynamodb::config::{Credentials, SharedHttpClient};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, SharedHttpConnector, http_client_fn,
};
use tokio::sync::Semaphore;

/// The region the emulator's resources are created in.
pub const REGION: &str = "us-east-1";

/// An SDK configuration for the emulator at `endpoint`: region us-east-1, dummy static
/// credentials, HTTP requests serialized within the process and no stalled-stream
/// protection (see the module docs).
pub async fn emulator_sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("test", "test", None, None, "emulator"))
        .http_client(serialized_http_client())
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .load()
        .await
}

/// The default HTTPS client with one request per service in flight at a time (per
/// process).
pub fn serialized_http_client() -> SharedHttpClient {
    static CLIENT: OnceLock<SharedHttpClient> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let inner = aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
                .build_https();
            http_client_fn(move |settings, components| {
                SharedHttpConnector::new(Serialized {
                    inner: inner.http_connector(settings, components),
                })
            })
        })
        .clone()
}

/// One request at a time per service across every serialized client of the process. The
/// service is told by the request's `X-Amz-Target` header (`DynamoDB_20120810.PutItem`,
/// `AmazonSQS.ReceiveMessage`, `secretsmanager.GetSecretValue`).
fn gate(request: &HttpRequest) -> &'static Semaphore {
    static GATES: [Semaphore; 4] = [
        Semaphore::const_new(1),
        Semaphore::const_new(1),
        Semaphore::const_new(1),
        Semaphore::const_new(1),
    ];
    let target = request.headers().get("x-amz-target").unwrap_or("");
    let service = target.split('.').next().unwrap_or("");
    let index = if service.starts_with("DynamoDB") {
        0
    } else if service.starts_with("AmazonSQS") {
        1
    } else if service.eq_ignore_ascii_case("secretsmanager") {
        2
    } else {
        3
    };
    &GATES[index]
}

#[derive(Debug)]
struct Serialized {
    inner: SharedHttpConnector,
}

impl HttpConnector for Serialized {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        let gate = gate(&request);
        HttpConnectorFuture::new(async move {
            // The semaphore is never closed.
            let _permit = gate.acquire().await.ok();
            inner.call(request).await
        })
    }
}
