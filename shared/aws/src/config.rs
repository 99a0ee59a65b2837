//! Configuration from the environment, read once at cold start. Each error names the
//! variable; nothing is hard-coded.

use std::collections::HashMap;
use std::time::Duration;

use pricing_core::limits::{DEFAULT_RATE_WINDOW, Quotas, RateWindow};
use pricing_core::retention::{Class, Retention};

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
    /// Optional quotas (docs/limits.md; defaults in `pricing_core::limits`).
    pub const MAX_PROJECTS_PER_TENANT: &str = "MAX_PROJECTS_PER_TENANT";
    pub const MAX_INSTANCES_PER_PROJECT: &str = "MAX_INSTANCES_PER_PROJECT";
    pub const MAX_SUBSCRIPTIONS_PER_SCOPE: &str = "MAX_SUBSCRIPTIONS_PER_SCOPE";
    /// Optional: requests per tenant per window (0 turns the per-tenant limit off).
    pub const TENANT_RATE_LIMIT: &str = "TENANT_RATE_LIMIT";
    /// Optional: the window of `TENANT_RATE_LIMIT`, in seconds.
    pub const TENANT_RATE_WINDOW_SECONDS: &str = "TENANT_RATE_WINDOW_SECONDS";
    /// Optional retention in days (`pricing_core::retention`; 0 keeps for ever, else at
    /// least 14): the TTL the written items carry.
    pub const RETAIN_CALCULATIONS_DAYS: &str = "RETAIN_CALCULATIONS_DAYS";
    pub const RETAIN_PRICE_HISTORY_DAYS: &str = "RETAIN_PRICE_HISTORY_DAYS";
    pub const RETAIN_DELIVERIES_DAYS: &str = "RETAIN_DELIVERIES_DAYS";
    pub const RETAIN_EVENTS_DAYS: &str = "RETAIN_EVENTS_DAYS";
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {0} is empty")]
    Empty(&'static str),
    #[error("environment variable {0} must be {1}")]
    Invalid(&'static str, &'static str),
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
    /// Quotas of the API (projects, instances, subscriptions).
    pub quotas: Quotas,
    /// The per-tenant request limit; `None` when turned off (`TENANT_RATE_LIMIT=0`).
    pub rate_limit: Option<RateWindow>,
    /// The retention policy (defaults: `Retention::default()`).
    pub retention: Retention,
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
        // Optional numbers: absent or empty is the default.
        let number = |name: &'static str, default: u64| match get(name) {
            None => Ok(default),
            Some(v) if v.trim().is_empty() => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| ConfigError::Invalid(name, "a whole number")),
        };
        let defaults = Quotas::default();
        let retention = |name: &'static str, class: Class| {
            Retention::period(class, number(name, class.default_days())?)
                .map_err(|_| ConfigError::Invalid(name, "0 (for ever) or 14 to 36500 days"))
        };
        let retention = Retention {
            calculations: retention(vars::RETAIN_CALCULATIONS_DAYS, Class::Calculations)?,
            price_history: retention(vars::RETAIN_PRICE_HISTORY_DAYS, Class::PriceHistory)?,
            deliveries: retention(vars::RETAIN_DELIVERIES_DAYS, Class::Deliveries)?,
            events: retention(vars::RETAIN_EVENTS_DAYS, Class::Events)?,
        };
        Ok(Config {
            retention,
            table_name: req(vars::TABLE_NAME)?,
            process_queue_url: req(vars::PROCESS_QUEUE_URL)?,
            recalc_queue_url: req(vars::RECALC_QUEUE_URL)?,
            webhook_queue_url: req(vars::WEBHOOK_QUEUE_URL)?,
            signing_keys_secret_id: req(vars::SIGNING_KEYS_SECRET_ID)?,
            public_keys_secret_id: req(vars::SIGNING_PUBLIC_KEYS_SECRET_ID)?,
            endpoint_url: get(vars::ENDPOINT_URL).filter(|v| !v.is_empty()),
            quotas: Quotas {
                projects_per_tenant: number(
                    vars::MAX_PROJECTS_PER_TENANT,
                    defaults.projects_per_tenant,
                )?,
                instances_per_project: number(
                    vars::MAX_INSTANCES_PER_PROJECT,
                    defaults.instances_per_project,
                )?,
                subscriptions_per_scope: number(
                    vars::MAX_SUBSCRIPTIONS_PER_SCOPE,
                    defaults.subscriptions_per_scope,
                )?,
            },
            rate_limit: match number(vars::TENANT_RATE_LIMIT, DEFAULT_RATE_WINDOW.limit)? {
                0 => None,
                limit => Some(RateWindow {
                    limit,
                    window: match number(
                        vars::TENANT_RATE_WINDOW_SECONDS,
                        DEFAULT_RATE_WINDOW.window.as_secs(),
                    )? {
                        0 => {
                            return Err(ConfigError::Invalid(
                                vars::TENANT_RATE_WINDOW_SECONDS,
                                "at least 1",
                            ));
                        }
                        secs => Duration::from_secs(secs),
                    },
                }),
            },
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

    #[test]
    fn limits_have_defaults_and_can_be_set() {
        let c = Config::from_map(&full()).expect("config");
        assert_eq!(c.quotas, Quotas::default());
        assert_eq!(c.rate_limit, Some(DEFAULT_RATE_WINDOW));
        let mut m = full();
        m.insert(vars::MAX_PROJECTS_PER_TENANT.into(), "3".into());
        m.insert(vars::MAX_INSTANCES_PER_PROJECT.into(), "4".into());
        m.insert(vars::MAX_SUBSCRIPTIONS_PER_SCOPE.into(), "5".into());
        m.insert(vars::TENANT_RATE_LIMIT.into(), "6".into());
        m.insert(vars::TENANT_RATE_WINDOW_SECONDS.into(), "60".into());
        let c = Config::from_map(&m).expect("config");
        assert_eq!(
            c.quotas,
            Quotas {
                projects_per_tenant: 3,
                instances_per_project: 4,
                subscriptions_per_scope: 5
            }
        );
        assert_eq!(
            c.rate_limit,
            Some(RateWindow {
                limit: 6,
                window: Duration::from_secs(60)
            })
        );
        m.insert(vars::TENANT_RATE_LIMIT.into(), "0".into());
        assert_eq!(Config::from_map(&m).expect("config").rate_limit, None);
        assert_eq!(c.retention, Retention::default());
        m.insert(vars::RETAIN_CALCULATIONS_DAYS.into(), "0".into());
        m.insert(vars::RETAIN_PRICE_HISTORY_DAYS.into(), "365".into());
        m.insert(vars::RETAIN_DELIVERIES_DAYS.into(), "14".into());
        m.insert(vars::RETAIN_EVENTS_DAYS.into(), "".into());
        assert_eq!(
            Config::from_map(&m).expect("config").retention,
            Retention::from_days(0, 365, 14, 90).expect("valid")
        );
        m.insert(vars::RETAIN_DELIVERIES_DAYS.into(), "7".into());
        assert_eq!(
            Config::from_map(&m),
            Err(ConfigError::Invalid(
                "RETAIN_DELIVERIES_DAYS",
                "0 (for ever) or 14 to 36500 days"
            ))
        );
        m.insert(vars::RETAIN_DELIVERIES_DAYS.into(), "30".into());
        m.insert(vars::MAX_PROJECTS_PER_TENANT.into(), "many".into());
        assert_eq!(
            Config::from_map(&m),
            Err(ConfigError::Invalid(
                "MAX_PROJECTS_PER_TENANT",
                "a whole number"
            ))
        );
    }
}
