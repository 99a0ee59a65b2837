//! Lambda glue shared by the functions in `functions/`: wiring from the environment (read
//! once at cold start), the caller's tenant from the API Gateway JWT authorizer, and SQS
//! batch handling with partial batch failures. The logic itself lives in the shared crates;
//! each function's `main.rs` only wires.

pub mod auth;
pub mod handlers;
pub mod http;
pub mod metrics;
pub mod rotator;
pub mod sqs;
pub mod wiring;

/// The runtime's tracing subscriber (JSON when AWS_LAMBDA_LOG_FORMAT=JSON), filtered by
/// RUST_LOG. Returns the start of the cold start, for [`initialized`].
pub fn init_tracing() -> std::time::Instant {
    let started = std::time::Instant::now();
    lambda_runtime::tracing::init_default_subscriber();
    started
}

/// Logs how long the cold start's own work took (config, clients, keys, router), and
/// starts recording the function's metrics (written as EMF at the end of each invocation).
pub fn initialized(function: &str, started: std::time::Instant) {
    metrics::install(function);
    let init_us = started.elapsed().as_micros() as u64;
    tracing::info!(function, init_us, "cold start initialized");
}

/// `KEY_ROTATION_DAYS`: rotate the signing keys when the active one is this old (default
/// 90; 0 never rotates).
pub fn key_rotation_from_env() -> Option<std::time::Duration> {
    let days = std::env::var("KEY_ROTATION_DAYS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(90);
    (days > 0).then(|| std::time::Duration::from_secs(days * 86_400))
}

/// Errors that stop a cold start; each names what is missing.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] pricing_aws::ConfigError),
    #[error("signing keys: {0}")]
    Keys(String),
}
