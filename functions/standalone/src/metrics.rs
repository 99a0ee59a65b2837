//! `/metrics`: the service's metrics in Prometheus text format, on a listener of its own
//! (`--metrics-listen`, loopback by default), optionally behind a bearer token
//! (`--metrics-token`). The counters and histograms are recorded by the shared code as it
//! works (`pricing_api::metrics`); the gauges (processing lag, oldest pending delivery,
//! signing key age) are read from storage and the keys at each scrape.

use std::net::SocketAddr;
use std::sync::Arc;

use aws_lc_rs::digest;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pricing_api::ApiError;
use pricing_api::metrics::{self, PROMETHEUS_CONTENT_TYPE, Registry};
use pricing_core::jws::Signer;
use pricing_core::time::Timestamp;
use pricing_embedded::EmbeddedStore;

/// The process's registry, made the `metrics` recorder on first use.
pub fn registry() -> Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let registry = Registry::new();
            if registry.install() {
                metrics::register_known();
            } else {
                tracing::warn!("another metrics recorder is installed; /metrics stays empty");
            }
            registry
        })
        .clone()
}

/// What a scrape reads.
pub struct Scrape {
    pub registry: Registry,
    pub store: EmbeddedStore,
    pub signer: Arc<Signer>,
    /// SHA-256 of the bearer token a scrape must present; `None`: no authentication.
    pub token_sha256: Option<Vec<u8>>,
}

impl Scrape {
    pub fn new(
        registry: Registry,
        store: EmbeddedStore,
        signer: Arc<Signer>,
        token: Option<&str>,
    ) -> Self {
        Scrape {
            registry,
            store,
            signer,
            token_sha256: token.map(sha256),
        }
    }
}

fn sha256(s: &str) -> Vec<u8> {
    digest::digest(&digest::SHA256, s.as_bytes())
        .as_ref()
        .to_vec()
}

/// Equal digests, compared in constant time.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The metrics listener's routes: `GET /metrics`.
pub fn router(scrape: Arc<Scrape>) -> Router {
    Router::new()
        .route("/metrics", get(serve))
        .with_state(scrape)
        // Every answer says the API version, as the API's do (its 404 and 405 too).
        .layer(axum::middleware::from_fn(pricing_api::api_version))
}

async fn serve(State(scrape): State<Arc<Scrape>>, headers: HeaderMap) -> Response {
    if let Some(expected) = &scrape.token_sha256 {
        // Exactly one Authorization header: with two, which one holds the token is not
        // for the server to pick.
        let mut given = headers.get_all(header::AUTHORIZATION).iter();
        let offered = given
            .next()
            .filter(|_| given.next().is_none())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| sha256(token.trim()));
        if !offered.is_some_and(|o| same(&o, expected)) {
            return ApiError::unauthorized(
                "/metrics needs the configured token as `Authorization: Bearer <token>`",
            )
            .with_header(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"metrics\""),
            )
            .into_response();
        }
    }
    let now = Timestamp::now();
    metrics::record_signing_key_age(&scrape.signer, now);
    match metrics::processing_lag(&scrape.store).await {
        Ok(lag) => metrics::record_processing_lag(lag),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read the processing lag"),
    }
    if let Err(e) = metrics::record_oldest_pending_delivery(&scrape.store, now).await {
        tracing::warn!(error = %e, "metrics: could not read the oldest pending delivery");
    }
    let body = metrics::render_prometheus(&scrape.registry.snapshot());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROMETHEUS_CONTENT_TYPE),
        )],
        body,
    )
        .into_response()
}

/// Where `/metrics` is served: `--metrics-listen` (`off` serves nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    Off,
    At(SocketAddr),
}

/// The default: loopback only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

impl std::str::FromStr for MetricsListen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsListen::Off);
        }
        s.parse::<SocketAddr>()
            .map(MetricsListen::At)
            .map_err(|e| format!("`{s}` is not an address (HOST:PORT) or `off`: {e}"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_listen_address_parses_or_is_off() {
        assert_eq!("off".parse::<MetricsListen>(), Ok(MetricsListen::Off));
        assert_eq!(
            DEFAULT_METRICS_LISTEN.parse::<MetricsListen>(),
            Ok(MetricsListen::At("127.0.0.1:9464".parse().unwrap()))
        );
        assert!("nowhere".parse::<MetricsListen>().is_err());
    }

    #[test]
    fn tokens_compare_by_digest() {
        assert!(same(&sha256("secret"), &sha256("secret")));
        assert!(!same(&sha256("secret"), &sha256("secreT")));
        assert!(!same(&sha256("secret"), &[]));
    }
}
