//! The functions' metrics as CloudWatch Embedded Metric Format: the shared code records
//! into a `pricing_api::metrics::Registry` (the `metrics` facade), and at the end of each
//! invocation [`flush`] writes what it recorded to stdout as EMF documents, one JSON line
//! each. CloudWatch Logs extracts the metrics from the function's log group: no API call,
//! nothing on the hot path but the line.
//!
//! One document per label set recorded in the invocation (most invocations have one): the
//! metric names are the ones the standalone serves on `/metrics`, each label is a
//! CloudWatch dimension (`code`, `trigger`, `outcome`; a metric without labels has none),
//! the namespace is `METRICS_NAMESPACE` (default [`DEFAULT_NAMESPACE`]), and the document
//! also names the function (`Function`, a property, not a dimension). Counters are what the
//! invocation added, gauges their last value, histograms the observations (at most 100 per
//! document, as EMF takes; more go into further documents).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

use pricing_api::metrics::{Delta, Labels, Registry, Sample, described};
use serde_json::{Map, Value, json};

/// The namespace when `METRICS_NAMESPACE` is not set.
pub const DEFAULT_NAMESPACE: &str = "Pricing";
/// Values of one metric in one EMF document at most.
pub const MAX_VALUES: usize = 100;

struct Emf {
    registry: Registry,
    namespace: String,
    function: String,
    out: Mutex<Box<dyn Write + Send>>,
}

static EMF: OnceLock<Emf> = OnceLock::new();

/// `METRICS_NAMESPACE`, or [`DEFAULT_NAMESPACE`].
pub fn namespace_from_env() -> String {
    std::env::var("METRICS_NAMESPACE")
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

/// At cold start: records the process's metrics, for [`flush`] to write to stdout.
pub fn install(function: &str) {
    install_to(function, &namespace_from_env(), Box::new(std::io::stdout()));
}

/// As [`install`], writing to `out`; `false` when the process records metrics already.
pub fn install_to(function: &str, namespace: &str, out: Box<dyn Write + Send>) -> bool {
    let registry = Registry::flushed();
    if !registry.install() {
        return false;
    }
    EMF.set(Emf {
        registry,
        namespace: namespace.to_owned(),
        function: function.to_owned(),
        out: Mutex::new(out),
    })
    .is_ok()
}

/// Writes what was recorded since the last flush as EMF lines (nothing when metrics are
/// not installed, or nothing was recorded). Called once at the end of every invocation.
pub fn flush() {
    let Some(emf) = EMF.get() else {
        return;
    };
    let samples = emf.registry.flush();
    if samples.is_empty() {
        return;
    }
    let now = pricing_core::time::Timestamp::now().millis();
    let mut out = emf.out.lock().unwrap_or_else(PoisonError::into_inner);
    let mut text = String::new();
    for doc in render(&emf.namespace, &emf.function, &samples, now) {
        text.push_str(&doc.to_string());
        text.push('\n');
    }
    // One write: the lines of a flush stay together.
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        tracing::warn!(error = %e, "could not write the metrics");
    }
}

/// The EMF documents of one flush: one per label set, and more while a histogram has more
/// than [`MAX_VALUES`] observations.
pub fn render(
    namespace: &str,
    function: &str,
    samples: &[Sample<Delta>],
    timestamp_ms: i64,
) -> Vec<Value> {
    let mut groups: BTreeMap<&Labels, Vec<&Sample<Delta>>> = BTreeMap::new();
    for s in samples {
        groups.entry(&s.labels).or_default().push(s);
    }
    let mut docs = Vec::new();
    for (labels, group) in groups {
        for round in 0.. {
            let mut root = Map::new();
            let mut definitions = Vec::new();
            for s in &group {
                let value = match &s.value {
                    Delta::Counter(n) if round == 0 => json!(n),
                    Delta::Gauge(v) if round == 0 && v.is_finite() => json!(v),
                    Delta::Histogram(values) => {
                        let chunk: Vec<f64> = values
                            .iter()
                            .copied()
                            .filter(|v| v.is_finite())
                            .skip(round * MAX_VALUES)
                            .take(MAX_VALUES)
                            .collect();
                        if chunk.is_empty() {
                            continue;
                        }
                        json!(chunk)
                    }
                    _ => continue,
                };
                let unit = described(&s.name).map_or("None", |d| d.unit);
                definitions.push(json!({"Name": s.name, "Unit": unit}));
                root.insert(s.name.clone(), value);
            }
            if definitions.is_empty() {
                break;
            }
            let dimensions: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            for (k, v) in labels {
                root.insert(k.clone(), json!(v));
            }
            root.insert("Function".into(), json!(function));
            root.insert(
                "_aws".into(),
                json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [dimensions],
                        "Metrics": definitions,
                    }],
                }),
            );
            docs.push(Value::Object(root));
        }
    }
    docs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use pricing_api::metrics::{
        APPLY_LATENCY, ENTRIES_ACCEPTED, ENTRIES_REJECTED, PROCESSING_LAG, Registry,
    };

    use super::*;

    fn recorded(f: impl FnOnce()) -> Vec<Sample<Delta>> {
        let registry = Registry::flushed();
        metrics::with_local_recorder(&registry, f);
        registry.flush()
    }

    #[test]
    fn one_document_per_label_set_with_its_dimensions_units_and_values() {
        let samples = recorded(|| {
            metrics::counter!(ENTRIES_ACCEPTED).increment(3);
            metrics::gauge!(PROCESSING_LAG).set(4.0);
            metrics::histogram!(APPLY_LATENCY).record(0.5);
            metrics::histogram!(APPLY_LATENCY).record(1.5);
            metrics::counter!(ENTRIES_REJECTED, "code" => "unknownItem").increment(2);
            metrics::counter!(ENTRIES_REJECTED, "code" => "itemRemoved").increment(1);
        });
        let docs = render(
            "Pricing/test",
            "entry-processor",
            &samples,
            1_700_000_000_000,
        );
        assert_eq!(docs.len(), 3, "{docs:#?}");
        let plain = docs
            .iter()
            .find(|d| d.get(ENTRIES_ACCEPTED).is_some())
            .unwrap();
        assert_eq!(
            plain,
            &json!({
                "_aws": {
                    "Timestamp": 1_700_000_000_000i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "Pricing/test",
                        "Dimensions": [[]],
                        "Metrics": [
                            {"Name": "pricing_apply_latency_seconds", "Unit": "Seconds"},
                            {"Name": "pricing_entries_accepted_total", "Unit": "Count"},
                            {"Name": "pricing_processing_lag_entries", "Unit": "Count"},
                        ],
                    }],
                },
                "Function": "entry-processor",
                "pricing_apply_latency_seconds": [0.5, 1.5],
                "pricing_entries_accepted_total": 3,
                "pricing_processing_lag_entries": 4.0,
            })
        );
        let by_code = |code: &str| {
            docs.iter()
                .find(|d| d["code"] == json!(code))
                .unwrap()
                .clone()
        };
        let unknown = by_code("unknownItem");
        assert_eq!(unknown[ENTRIES_REJECTED], json!(2));
        assert_eq!(
            unknown["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["code"]])
        );
        assert_eq!(by_code("itemRemoved")[ENTRIES_REJECTED], json!(1));
    }

    #[test]
    fn more_than_100_observations_go_into_further_documents() {
        let samples = recorded(|| {
            metrics::counter!(ENTRIES_ACCEPTED).increment(1);
            for i in 0..250 {
                metrics::histogram!(APPLY_LATENCY).record(f64::from(i));
            }
        });
        let docs = render("Pricing", "f", &samples, 0);
        assert_eq!(docs.len(), 3);
        let lens: Vec<usize> = docs
            .iter()
            .map(|d| d[APPLY_LATENCY].as_array().unwrap().len())
            .collect();
        assert_eq!(lens, vec![100, 100, 50]);
        // The counter once, in the first document only.
        assert_eq!(docs[0][ENTRIES_ACCEPTED], json!(1));
        assert!(docs[1].get(ENTRIES_ACCEPTED).is_none());
        let names: Vec<&Value> = docs[1]["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["Name"])
            .collect();
        assert_eq!(names, vec![&json!(APPLY_LATENCY)]);
    }

    #[test]
    fn nothing_recorded_renders_nothing() {
        assert!(render("Pricing", "f", &[], 0).is_empty());
    }
}
