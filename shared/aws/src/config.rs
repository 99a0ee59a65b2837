//! Configuration from the environment, read once at cold start. Each error names the
//! variable; nothing is hard-coded.

use std::collections::HashMap;

/// Names of the variables (set by template.yaml Globals for every function).
pub mod vars {
    pub const TABLE_NAME: &str = "TABLE_NAME";
    pub const PROCESS_QUEUE_URL: &str = "PROCESS_QUEUE_URL";
    pub const RECALC_QUEUE_URL: &str = "RECALC_QUEUE_URL";
    pub const WEBHOOK_QUEUE_URL: &str = "WEBHOOK_QUEUE_URL";
    /// The signing keys (private): read by the functions that sign, written by the
    /// key-rotator.
    pub const SIGNING_KEYS_SECRET_ID: &str = "SIGNING_KEYS_SECRET_ID";
    /// Their public halves: read by the management API, written by the key-rotator.
    pub const SIGNING_PUBLIC_KEYS_SECRET_ID: &str = "SIGNING_PUBLIC_KEYS_SECRET_ID";
    /// Optional: an endpoint override for every AWS client (local emulator).
    pub const ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {0} is empty")]
    Empty(&'static str),
}

/// Where the stack's resources are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub table_name: String,
    pub process_queue_url: String,
    pub recalc_queue_url: String,
    pub webhook_queue_url: String,
    pub signing_keys_secret_id: String,
    pub public_keys_secret_id: String,
    pub endpoint_url: Option<String>,
}

impl Config {
    /// From the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From a map (tests, or an emulator's provisioned environment).
    pub fn from_map(map: &HashMap<String, String>) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| map.get(k).cloned())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let req = |name: &'static str| match get(name) {
            None => Err(ConfigError::Missing(name)),
            Some(v) if v.trim().is_empty() => Err(ConfigError::Empty(name)),
            Some(v) => Ok(v),
        };
        Ok(Config {
            table_name: req(vars::TABLE_NAME)?,
            process_queue_url: req(vars::PROCESS_QUEUE_URL)?,
            recalc_queue_url: req(vars::RECALC_QUEUE_URL)?,
            webhook_queue_url: req(vars::WEBHOOK_QUEUE_URL)?,
            signing_keys_secret_id: req(vars::SIGNING_KEYS_SECRET_ID)?,
            public_keys_secret_id: req(vars::SIGNING_PUBLIC_KEYS_SECRET_ID)?,
            endpoint_url: get(vars::ENDPOINT_URL).filter(|v| !v.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> HashMap<String, String> {
        [
            (vars::TABLE_NAME, "t"),
            (vars::PROCESS_QUEUE_URL, "q1"),
            (vars::RECALC_QUEUE_URL, "q2"),
            (vars::WEBHOOK_QUEUE_URL, "q3"),
            (vars::SIGNING_KEYS_SECRET_ID, "s"),
            (vars::SIGNING_PUBLIC_KEYS_SECRET_ID, "p"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn names_the_missing_variable() {
        assert!(Config::from_map(&full()).is_ok());
        let mut m = full();
        m.remove(vars::PROCESS_QUEUE_URL);
        assert_eq!(
            Config::from_map(&m),
            Err(ConfigError::Missing("PROCESS_QUEUE_URL"))
        );
        let mut m = full();
        m.insert(vars::TABLE_NAME.into(), " ".into());
        let e = Config::from_map(&m).unwrap_err();
        assert_eq!(e.to_string(), "environment variable TABLE_NAME is empty");
    }
}
