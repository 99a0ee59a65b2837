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
/// 90 when unset or blank; 0 never rotates). A value that is not a whole number of days a duration
/// holds stops the cold start, naming the variable, as every other setting does (it was
/// read as 90: `0.5` meant to rotate twice a day rotated every 90 days, and a huge one
/// wrapped around to hours).
pub fn key_rotation_from_env() -> Result<Option<std::time::Duration>, pricing_aws::ConfigError> {
    key_rotation(std::env::var("KEY_ROTATION_DAYS").ok().as_deref())
}

fn key_rotation(
    value: Option<&str>,
) -> Result<Option<std::time::Duration>, pricing_aws::ConfigError> {
    // Unset or blank: the default, as every other setting reads a blank one.
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(Some(std::time::Duration::from_secs(90 * 86_400)));
    };
    let days = value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|d| d.checked_mul(86_400).is_some())
        .ok_or(pricing_aws::ConfigError::Invalid(
            "KEY_ROTATION_DAYS",
            "a whole number of days (0 never rotates)",
        ))?;
    Ok((days > 0).then(|| std::time::Duration::from_secs(days * 86_400)))
}

/// Errors that stop a cold start; each names what is missing.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] pricing_aws::ConfigError),
    #[error("signing keys: {0}")]
    Keys(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_rotation_period_is_a_whole_number_of_days_or_the_start_stops() {
        let days = |d: u64| Some(std::time::Duration::from_secs(d * 86_400));
        assert_eq!(key_rotation(None).unwrap(), days(90));
        assert_eq!(key_rotation(Some(" ")).unwrap(), days(90));
        assert_eq!(key_rotation(Some("30")).unwrap(), days(30));
        assert_eq!(key_rotation(Some(" 7 ")).unwrap(), days(7));
        assert_eq!(key_rotation(Some("0")).unwrap(), None);
        for bad in [
            "0.5",
            "1.0",
            "7.5",
            "-1",
            "1e3",
            "ninety",
            "213503982334602",
        ] {
            let e = key_rotation(Some(bad)).expect_err(bad).to_string();
            assert!(e.contains("KEY_ROTATION_DAYS"), "{bad}: {e}");
        }
    }
}
