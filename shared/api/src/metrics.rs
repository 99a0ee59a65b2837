//! The service's metrics: their names, what records them (the outcomes of the shared
//! application code, never log lines), and the registry behind the `metrics` facade that
//! both deployments read: the standalone renders it as Prometheus text on `/metrics`
//! ([`render_prometheus`]), the Lambda functions write what an invocation recorded as
//! CloudWatch Embedded Metric Format (`pricing_lambda::metrics`). The names and labels are
//! the same on both (docs/operations.md, "Metrics").

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use pricing_core::jws::Signer;
use pricing_core::model::{AppendOutcome, Message};
use pricing_core::ports::{
    Backlog, DeliveryStore, Enqueue, EntryLog, StateStore, StoreResult, SubscriptionStore,
    WebhookTransport,
};
use pricing_core::process::{ProcessReport, Processor};
use pricing_core::time::Timestamp;
use pricing_core::webhooks::delivery::Response;
use pricing_core::webhooks::{self, Settle};
use pricing_core::work::{self, Handled, WorkStore};

/// Entries stored in an instance's log by a submission.
pub const ENTRIES_ACCEPTED: &str = "pricing_entries_accepted_total";
/// Entries answered as duplicates (their transaction id was logged before).
pub const ENTRIES_DUPLICATED: &str = "pricing_entries_duplicated_total";
/// Entries the apply step rejected (`entries.rejected` events), label `code`.
pub const ENTRIES_REJECTED: &str = "pricing_entries_rejected_total";
/// Entries the apply step applied.
pub const ENTRIES_APPLIED: &str = "pricing_entries_applied_total";
/// Log entries waiting to be applied (newest sequence minus applied sequence).
pub const PROCESSING_LAG: &str = "pricing_processing_lag_entries";
/// From an entry's receipt to its application.
pub const APPLY_LATENCY: &str = "pricing_apply_latency_seconds";
/// Price calculations stored, label `trigger`.
pub const CALCULATIONS: &str = "pricing_calculations_total";
/// How long a calculation took (its message handled), label `trigger`.
pub const CALCULATION_DURATION: &str = "pricing_calculation_duration_seconds";
/// Prices a stored calculation changed, label `trigger`.
pub const PRICES_CHANGED: &str = "pricing_prices_changed_total";
/// Webhook delivery attempts, label `outcome`: succeeded, retrying, failed.
pub const DELIVERIES: &str = "pricing_webhook_deliveries_total";
/// Webhook delivery attempts that did not succeed (retrying or failed for good), label
/// `subscription` (its id): what the per-subscription failure alarm watches.
pub const WEBHOOK_FAILURES: &str = "pricing_webhook_failures_total";
/// How long a webhook POST took.
pub const ATTEMPT_DURATION: &str = "pricing_webhook_attempt_duration_seconds";
/// How long the longest-waiting due webhook delivery has been due.
pub const OLDEST_PENDING_DELIVERY: &str = "pricing_webhook_oldest_pending_seconds";
/// Age of the key that signs entries and webhooks.
pub const SIGNING_KEY_AGE: &str = "pricing_signing_key_age_seconds";

/// The kinds of metrics, as Prometheus names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric the service records: name, kind, its labels, its unit (as CloudWatch names
/// it) and what it means.
#[derive(Debug, Clone, Copy)]
pub struct Described {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub unit: &'static str,
    pub help: &'static str,
}

/// Every metric of the service (docs/operations.md lists the same).
pub const METRICS: &[Described] = &[
    Described {
        name: ENTRIES_ACCEPTED,
        kind: Kind::Counter,
        labels: &[],
        unit: "Count",
        help: "Entries stored in an instance's log by a submission.",
    },
    Described {
        name: ENTRIES_DUPLICATED,
        kind: Kind::Counter,
        labels: &[],
        unit: "Count",
        help: "Entries answered as duplicates of a logged transaction id.",
    },
    Described {
        name: ENTRIES_REJECTED,
        kind: Kind::Counter,
        labels: &["code"],
        unit: "Count",
        help: "Entries the apply step rejected (entries.rejected events), by rejection code.",
    },
    Described {
        name: ENTRIES_APPLIED,
        kind: Kind::Counter,
        labels: &[],
        unit: "Count",
        help: "Entries the apply step applied to an instance's state.",
    },
    Described {
        name: PROCESSING_LAG,
        kind: Kind::Gauge,
        labels: &[],
        unit: "Count",
        help: "Log entries not applied yet (newest sequence minus applied sequence), the largest of one instance.",
    },
    Described {
        name: APPLY_LATENCY,
        kind: Kind::Histogram,
        labels: &[],
        unit: "Seconds",
        help: "From an entry's receipt to its application: the oldest entry of each processor run.",
    },
    Described {
        name: CALCULATIONS,
        kind: Kind::Counter,
        labels: &["trigger"],
        unit: "Count",
        help: "Price calculations stored, by trigger (schedule, sales, request).",
    },
    Described {
        name: CALCULATION_DURATION,
        kind: Kind::Histogram,
        labels: &["trigger"],
        unit: "Seconds",
        help: "How long a stored calculation took (log tail, engine, storing, dispatch).",
    },
    Described {
        name: PRICES_CHANGED,
        kind: Kind::Counter,
        labels: &["trigger"],
        unit: "Count",
        help: "Prices a stored calculation changed (an item's first price counts).",
    },
    Described {
        name: DELIVERIES,
        kind: Kind::Counter,
        labels: &["outcome"],
        unit: "Count",
        help: "Webhook delivery attempts by outcome: succeeded, retrying (will be attempted again), failed (for good).",
    },
    Described {
        name: WEBHOOK_FAILURES,
        kind: Kind::Counter,
        labels: &["subscription"],
        unit: "Count",
        help: "Webhook delivery attempts that did not succeed, by subscription id.",
    },
    Described {
        name: ATTEMPT_DURATION,
        kind: Kind::Histogram,
        labels: &[],
        unit: "Seconds",
        help: "How long a webhook POST took, until the answer or the error.",
    },
    Described {
        name: OLDEST_PENDING_DELIVERY,
        kind: Kind::Gauge,
        labels: &[],
        unit: "Seconds",
        help: "How long the longest-waiting webhook delivery has been due (0 when none is due).",
    },
    Described {
        name: SIGNING_KEY_AGE,
        kind: Kind::Gauge,
        labels: &[],
        unit: "Seconds",
        help: "Age of the key that signs entries and webhooks now.",
    },
];

/// Makes every counter whose label values are known exist at 0 (a scrape then shows each
/// series from the start: `pricing_entries_rejected_total`'s codes appear as they occur).
pub fn register_known() {
    for d in METRICS.iter().filter(|d| d.kind == Kind::Counter) {
        match d.labels {
            [] => metrics::counter!(d.name).increment(0),
            ["trigger"] => {
                for t in ["schedule", "sales", "request"] {
                    metrics::counter!(d.name, "trigger" => t).increment(0);
                }
            }
            ["outcome"] => {
                for o in ["succeeded", "retrying", "failed"] {
                    metrics::counter!(d.name, "outcome" => o).increment(0);
                }
            }
            _ => {}
        }
    }
}

/// The description of a metric of the service.
pub fn described(name: &str) -> Option<&'static Described> {
    METRICS.iter().find(|d| d.name == name)
}

// ---------------------------------------------------------------------------------------
// Recording: from the outcomes of the shared code.

/// A submission's outcomes (POST .../entries).
pub fn entries_submitted(outcomes: &[AppendOutcome]) {
    let accepted = outcomes
        .iter()
        .filter(|o| matches!(o, AppendOutcome::Accepted { .. }))
        .count() as u64;
    let duplicated = outcomes.len() as u64 - accepted;
    metrics::counter!(ENTRIES_ACCEPTED).increment(accepted);
    metrics::counter!(ENTRIES_DUPLICATED).increment(duplicated);
}

fn seconds_between(earlier: Timestamp, later: Timestamp) -> f64 {
    (later.millis() - earlier.millis()).max(0) as f64 / 1000.0
}

/// What one run of the apply step did.
fn applied(report: &ProcessReport, now: Timestamp) {
    metrics::counter!(ENTRIES_APPLIED).increment(report.applied);
    for (code, n) in &report.rejected_codes {
        metrics::counter!(ENTRIES_REJECTED, "code" => code.clone()).increment(*n);
    }
    if let Some(received) = report.first_received_at {
        metrics::histogram!(APPLY_LATENCY).record(seconds_between(received, now));
    }
}

/// What handling one work message did (`elapsed`: how long it took).
pub fn work_handled(message: &Message, handled: &Handled, elapsed: Duration, now: Timestamp) {
    match handled {
        Handled::Processed { report, .. } => applied(report, now),
        Handled::Calculated { changed, apply, .. } => {
            applied(apply, now);
            let trigger = match message {
                Message::Recalculate { trigger, .. } => trigger.as_str(),
                _ => "unknown",
            };
            metrics::counter!(CALCULATIONS, "trigger" => trigger).increment(1);
            metrics::counter!(PRICES_CHANGED, "trigger" => trigger).increment(*changed as u64);
            metrics::histogram!(CALCULATION_DURATION, "trigger" => trigger)
                .record(elapsed.as_secs_f64());
        }
        Handled::AlreadyCalculated { .. }
        | Handled::Deactivated { .. }
        | Handled::Inactive { .. }
        | Handled::UnknownInstance => {}
    }
}

/// The log entries one run of the apply step found waiting (newest sequence minus applied
/// sequence when it started): the processing lag as a Lambda function sees it.
pub fn lag_found(handled: &Handled) -> Option<u64> {
    match handled {
        Handled::Processed { report, .. } | Handled::Calculated { apply: report, .. } => {
            Some(report.applied + report.rejected)
        }
        _ => None,
    }
}

/// `pricing_core::work::handle`, recording what it did.
pub async fn handle_work<S: WorkStore, Q: Enqueue>(
    store: &S,
    queue: &Q,
    processor: &Processor,
    message: &Message,
    now: Timestamp,
) -> StoreResult<Handled> {
    let started = Instant::now();
    let handled = work::handle(store, queue, processor, message, now).await?;
    work_handled(message, &handled, started.elapsed(), now);
    Ok(handled)
}

/// What a webhook POST did: delivered or not, how long it took, and (when it was not
/// delivered) the subscription the body names.
type Attempt = (bool, Duration, Option<String>);

/// A webhook transport that notes the attempt it made (at most one per message).
struct Observed<T> {
    inner: T,
    attempt: Arc<Mutex<Option<Attempt>>>,
}

/// The `subscriptionId` of a webhook envelope (read only for an attempt that failed).
fn subscription_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope {
        subscription_id: String,
    }
    serde_json::from_slice::<Envelope>(body)
        .ok()
        .map(|e| e.subscription_id)
}

impl<T: WebhookTransport> WebhookTransport for Observed<T> {
    async fn post(&self, request: pricing_core::ports::WebhookRequest) -> Response {
        let started = Instant::now();
        let subscription = subscription_of(&request.body);
        let response = self.inner.post(request).await;
        let delivered =
            matches!(response, Response::Status { status, .. } if (200..300).contains(&status));
        *self.attempt.lock().unwrap_or_else(PoisonError::into_inner) = Some((
            delivered,
            started.elapsed(),
            subscription.filter(|_| !delivered),
        ));
        response
    }

    fn take_place(&self, destination: &str, tenant: &str) -> Option<pricing_core::webhooks::Place> {
        self.inner.take_place(destination, tenant)
    }
}

/// `pricing_core::webhooks::handle` (one message of the webhooks lane), recording the
/// attempt it made: its outcome and how long the POST took.
pub async fn handle_webhook<S, Q, T>(
    store: &S,
    queue: &Q,
    transport: &T,
    signer: &Signer,
    message: &Message,
    now: Timestamp,
) -> StoreResult<Settle>
where
    S: DeliveryStore
        + SubscriptionStore
        + pricing_core::ports::InstanceStore
        + pricing_core::ports::PriceStore
        + pricing_core::ports::EventStore,
    Q: Enqueue,
    T: WebhookTransport + Clone,
{
    let observed = Observed {
        inner: transport.clone(),
        attempt: Arc::default(),
    };
    let settle = webhooks::handle(store, queue, &observed, signer, message, now).await;
    let attempt = observed
        .attempt
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some((delivered, took, failed_subscription)) = attempt {
        let outcome = match (&settle, delivered) {
            (_, true) => "succeeded",
            (Ok(Settle::RetryIn(_)) | Err(_), false) => "retrying",
            (Ok(Settle::Done | Settle::DeadLetter), false) => "failed",
        };
        metrics::counter!(DELIVERIES, "outcome" => outcome).increment(1);
        if let Some(subscription) = failed_subscription {
            metrics::counter!(WEBHOOK_FAILURES, "subscription" => subscription).increment(1);
        }
        metrics::histogram!(ATTEMPT_DURATION).record(took.as_secs_f64());
    }
    settle
}

/// How long the longest-waiting due delivery has been due at `now` (0 when none is).
pub async fn oldest_pending_delivery<S: DeliveryStore>(
    store: &S,
    now: Timestamp,
) -> StoreResult<f64> {
    let Some(id) = store.overdue_deliveries(now, 1).await?.into_iter().next() else {
        return Ok(0.0);
    };
    Ok(match store.get_delivery(&id).await? {
        Some(d) => seconds_between(d.next_attempt_at.unwrap_or(d.created_at), now),
        None => 0.0,
    })
}

/// Sets [`OLDEST_PENDING_DELIVERY`] from storage.
pub async fn record_oldest_pending_delivery<S: DeliveryStore>(
    store: &S,
    now: Timestamp,
) -> StoreResult<()> {
    let age = oldest_pending_delivery(store, now).await?;
    metrics::gauge!(OLDEST_PENDING_DELIVERY).set(age);
    Ok(())
}

/// Sets [`SIGNING_KEY_AGE`] from the keys in use.
pub fn record_signing_key_age(signer: &Signer, now: Timestamp) {
    let age = seconds_between(signer.signing_key_created_at(now), now);
    metrics::gauge!(SIGNING_KEY_AGE).set(age);
}

/// Instances looked at for the processing lag at most.
pub const LAG_INSTANCES: usize = 1_000;

/// The processing lag from storage: the largest number of log entries not applied yet of
/// one instance (newest sequence minus applied sequence), over the instances whose log is
/// ahead (at most [`LAG_INSTANCES`]).
pub async fn processing_lag<S: Backlog + EntryLog + StateStore>(store: &S) -> StoreResult<u64> {
    let mut lag = 0;
    for key in store.instances_behind(LAG_INSTANCES).await? {
        let newest = store.last_sequence(&key).await?;
        let applied = store.applied_sequence(&key).await?;
        lag = lag.max(newest.saturating_sub(applied));
    }
    Ok(lag)
}

/// Sets [`PROCESSING_LAG`].
pub fn record_processing_lag(entries: u64) {
    metrics::gauge!(PROCESSING_LAG).set(entries as f64);
}

// ---------------------------------------------------------------------------------------
// The registry behind the facade.

/// Histogram bucket bounds (seconds) of the Prometheus rendering.
pub const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Histogram observations kept between two flushes at most (the Lambda registry).
const MAX_SAMPLES: usize = 10_000;

/// A metric's identity: its name and its labels (sorted).
pub type Labels = Vec<(String, String)>;

#[derive(Default)]
struct CounterCell {
    total: AtomicU64,
    flushed: AtomicU64,
}

impl CounterFn for CounterCell {
    fn increment(&self, value: u64) {
        self.total.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.total.fetch_max(value, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct GaugeCell {
    bits: AtomicU64,
    touched: AtomicBool,
}

impl GaugeCell {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(f(f64::from_bits(b)).to_bits())
            });
        self.touched.store(true, Ordering::Relaxed);
    }
}

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

#[derive(Default)]
struct HistogramState {
    /// Observations per bucket of [`BUCKETS`] (not cumulative), and above the last.
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
    /// Observations since the last flush (kept only by a registry that flushes).
    samples: Vec<f64>,
}

struct HistogramCell {
    keep_samples: bool,
    state: Mutex<HistogramState>,
}

impl HistogramFn for HistogramCell {
    fn record(&self, value: f64) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.buckets.is_empty() {
            s.buckets = vec![0; BUCKETS.len() + 1];
        }
        let at = BUCKETS
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(BUCKETS.len());
        s.buckets[at] += 1;
        s.count += 1;
        s.sum += value;
        if self.keep_samples && s.samples.len() < MAX_SAMPLES {
            s.samples.push(value);
        }
    }
}

#[derive(Clone)]
enum Cell {
    Counter(Arc<CounterCell>),
    Gauge(Arc<GaugeCell>),
    Histogram(Arc<HistogramCell>),
}

/// A recorder for the `metrics` facade that keeps every metric in memory: cumulative
/// values for a scrape ([`Registry::snapshot`]), and what changed since the last flush
/// ([`Registry::flush`]). Cheap to clone (clones share the metrics).
#[derive(Clone, Default)]
pub struct Registry {
    keep_samples: bool,
    cells: Arc<Mutex<BTreeMap<(String, Labels), Cell>>>,
}

/// A metric's value in a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(u64),
    Gauge(f64),
    /// Cumulative counts per bucket bound of [`BUCKETS`] (the last is `+Inf`), count, sum.
    Histogram {
        buckets: Vec<u64>,
        count: u64,
        sum: f64,
    },
}

/// What a metric recorded since the last flush.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Counter(u64),
    Gauge(f64),
    /// The observations.
    Histogram(Vec<f64>),
}

/// One metric with its labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<V> {
    pub name: String,
    pub labels: Labels,
    pub value: V,
}

impl Registry {
    /// A registry for scrapes (histograms keep bucket counts only).
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry that is flushed (the Lambda functions): histograms also keep their
    /// observations until the next flush.
    pub fn flushed() -> Self {
        Registry {
            keep_samples: true,
            ..Self::default()
        }
    }

    /// Makes this registry the process's recorder; `false` when one was set before.
    pub fn install(&self) -> bool {
        metrics::set_global_recorder(self.clone()).is_ok()
    }

    fn cell(&self, key: &Key, make: impl FnOnce() -> Cell) -> Cell {
        let mut labels: Labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells
            .entry((key.name().to_owned(), labels))
            .or_insert_with(make)
            .clone()
    }

    /// Every metric recorded so far, by name then labels.
    pub fn snapshot(&self) -> Vec<Sample<Value>> {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells
            .iter()
            .map(|((name, labels), cell)| {
                let value = match cell {
                    Cell::Counter(c) => Value::Counter(c.total.load(Ordering::Relaxed)),
                    Cell::Gauge(g) => Value::Gauge(f64::from_bits(g.bits.load(Ordering::Relaxed))),
                    Cell::Histogram(h) => {
                        let s = h.state.lock().unwrap_or_else(PoisonError::into_inner);
                        let mut running = 0;
                        let mut buckets: Vec<u64> = (0..=BUCKETS.len())
                            .map(|i| {
                                running += s.buckets.get(i).copied().unwrap_or(0);
                                running
                            })
                            .collect();
                        buckets.truncate(BUCKETS.len() + 1);
                        Value::Histogram {
                            buckets,
                            count: s.count,
                            sum: s.sum,
                        }
                    }
                };
                Sample {
                    name: name.clone(),
                    labels: labels.clone(),
                    value,
                }
            })
            .collect()
    }

    /// What changed since the last flush: counters that grew (by how much), gauges that
    /// were set, histograms' observations; and starts the next interval.
    pub fn flush(&self) -> Vec<Sample<Delta>> {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for ((name, labels), cell) in cells.iter() {
            let delta = match cell {
                Cell::Counter(c) => {
                    let total = c.total.load(Ordering::Relaxed);
                    let before = c.flushed.swap(total, Ordering::Relaxed);
                    (total > before).then(|| Delta::Counter(total - before))
                }
                Cell::Gauge(g) => g
                    .touched
                    .swap(false, Ordering::Relaxed)
                    .then(|| Delta::Gauge(f64::from_bits(g.bits.load(Ordering::Relaxed)))),
                Cell::Histogram(h) => {
                    let mut s = h.state.lock().unwrap_or_else(PoisonError::into_inner);
                    let samples = std::mem::take(&mut s.samples);
                    (!samples.is_empty()).then_some(Delta::Histogram(samples))
                }
            };
            if let Some(value) = delta {
                out.push(Sample {
                    name: name.clone(),
                    labels: labels.clone(),
                    value,
                });
            }
        }
        out
    }
}

impl Recorder for Registry {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match self.cell(key, || Cell::Counter(Arc::default())) {
            Cell::Counter(c) => Counter::from_arc(c),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match self.cell(key, || Cell::Gauge(Arc::default())) {
            Cell::Gauge(g) => Gauge::from_arc(g),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let keep_samples = self.keep_samples;
        let make = || {
            Cell::Histogram(Arc::new(HistogramCell {
                keep_samples,
                state: Mutex::default(),
            }))
        };
        match self.cell(key, make) {
            Cell::Histogram(h) => Histogram::from_arc(h),
            _ => Histogram::noop(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus text format (version 0.0.4).

/// The content type of [`render_prometheus`]'s text.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_set(labels: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// A snapshot as Prometheus text: `# HELP` and `# TYPE` once per name, then each labelled
/// value; histograms as `_bucket{le=...}`, `_sum` and `_count`.
pub fn render_prometheus(samples: &[Sample<Value>]) -> String {
    let mut out = String::new();
    let mut last: Option<&str> = None;
    for s in samples {
        if last != Some(s.name.as_str()) {
            let kind = match s.value {
                Value::Counter(_) => Kind::Counter,
                Value::Gauge(_) => Kind::Gauge,
                Value::Histogram { .. } => Kind::Histogram,
            };
            if let Some(d) = described(&s.name) {
                let _ = writeln!(out, "# HELP {} {}", s.name, d.help);
            }
            let _ = writeln!(out, "# TYPE {} {}", s.name, kind.as_str());
            last = Some(s.name.as_str());
        }
        match &s.value {
            Value::Counter(v) => {
                let _ = writeln!(out, "{}{} {v}", s.name, label_set(&s.labels, None));
            }
            Value::Gauge(v) => {
                let _ = writeln!(
                    out,
                    "{}{} {}",
                    s.name,
                    label_set(&s.labels, None),
                    number(*v)
                );
            }
            Value::Histogram {
                buckets,
                count,
                sum,
            } => {
                for (i, n) in buckets.iter().enumerate() {
                    let le = BUCKETS.get(i).map_or("+Inf".to_owned(), |b| number(*b));
                    let _ = writeln!(
                        out,
                        "{}_bucket{} {n}",
                        s.name,
                        label_set(&s.labels, Some(("le", &le)))
                    );
                }
                let labels = label_set(&s.labels, None);
                let _ = writeln!(out, "{}_sum{labels} {}", s.name, number(*sum));
                let _ = writeln!(out, "{}_count{labels} {count}", s.name);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_name_is_described_once_with_its_unit_in_the_name() {
        for (i, d) in METRICS.iter().enumerate() {
            assert!(d.name.starts_with("pricing_"), "{}", d.name);
            assert!(
                METRICS[i + 1..].iter().all(|o| o.name != d.name),
                "{}",
                d.name
            );
            match d.kind {
                Kind::Counter => assert!(d.name.ends_with("_total"), "{}", d.name),
                Kind::Histogram => assert!(d.name.ends_with("_seconds"), "{}", d.name),
                Kind::Gauge => assert!(!d.name.ends_with("_total"), "{}", d.name),
            }
        }
    }

    #[test]
    fn a_registry_keeps_totals_for_scrapes_and_deltas_for_flushes() {
        let registry = Registry::flushed();
        metrics::with_local_recorder(&registry, || {
            metrics::counter!(ENTRIES_ACCEPTED).increment(3);
            metrics::counter!(ENTRIES_REJECTED, "code" => "unknownItem").increment(1);
            metrics::gauge!(PROCESSING_LAG).set(7.0);
            metrics::histogram!(APPLY_LATENCY).record(0.2);
            metrics::histogram!(APPLY_LATENCY).record(2.0);
        });
        let flushed = registry.flush();
        let get = |name: &str| {
            flushed
                .iter()
                .find(|s| s.name == name)
                .unwrap()
                .value
                .clone()
        };
        assert_eq!(get(ENTRIES_ACCEPTED), Delta::Counter(3));
        assert_eq!(get(PROCESSING_LAG), Delta::Gauge(7.0));
        assert_eq!(get(APPLY_LATENCY), Delta::Histogram(vec![0.2, 2.0]));
        let rejected = flushed.iter().find(|s| s.name == ENTRIES_REJECTED).unwrap();
        assert_eq!(rejected.labels, vec![("code".into(), "unknownItem".into())]);
        // Nothing new: nothing to flush; totals stay for a scrape.
        assert!(registry.flush().is_empty());
        metrics::with_local_recorder(&registry, || {
            metrics::counter!(ENTRIES_ACCEPTED).increment(2);
        });
        assert_eq!(
            registry.flush(),
            vec![Sample {
                name: ENTRIES_ACCEPTED.into(),
                labels: vec![],
                value: Delta::Counter(2)
            }]
        );
        let snapshot = registry.snapshot();
        let total = snapshot
            .iter()
            .find(|s| s.name == ENTRIES_ACCEPTED)
            .unwrap();
        assert_eq!(total.value, Value::Counter(5));
    }

    #[test]
    fn prometheus_text_has_help_type_labels_and_cumulative_buckets() {
        let registry = Registry::new();
        metrics::with_local_recorder(&registry, || {
            metrics::counter!(DELIVERIES, "outcome" => "succeeded").increment(2);
            metrics::counter!(DELIVERIES, "outcome" => "retrying").increment(1);
            metrics::gauge!(SIGNING_KEY_AGE).set(90.5);
            metrics::histogram!(ATTEMPT_DURATION).record(0.25);
            metrics::histogram!(ATTEMPT_DURATION).record(0.5);
            metrics::histogram!(ATTEMPT_DURATION).record(5000.0);
        });
        let text = render_prometheus(&registry.snapshot());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("# TYPE pricing_webhook_deliveries_total counter"))
                .count(),
            1,
            "{text}"
        );
        assert!(lines.contains(&"pricing_webhook_deliveries_total{outcome=\"succeeded\"} 2"));
        assert!(lines.contains(&"pricing_webhook_deliveries_total{outcome=\"retrying\"} 1"));
        assert!(lines.contains(&"pricing_signing_key_age_seconds 90.5"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_bucket{le=\"0.005\"} 0"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_bucket{le=\"0.25\"} 1"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_bucket{le=\"3600\"} 2"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_count 3"));
        assert!(lines.contains(&"pricing_webhook_attempt_duration_seconds_sum 5000.75"));
        assert!(text.contains("# HELP pricing_signing_key_age_seconds Age of the key"));
    }

    #[test]
    fn known_counters_start_at_zero_and_flush_nothing() {
        let registry = Registry::flushed();
        metrics::with_local_recorder(&registry, register_known);
        let text = render_prometheus(&registry.snapshot());
        assert!(
            text.contains("\npricing_entries_accepted_total 0\n"),
            "{text}"
        );
        assert!(text.contains("pricing_calculations_total{trigger=\"sales\"} 0"));
        assert!(text.contains("pricing_webhook_deliveries_total{outcome=\"failed\"} 0"));
        assert!(registry.flush().is_empty());
    }

    /// A receiver that answers every POST with `status`.
    #[derive(Clone)]
    struct Answers(u16);

    impl WebhookTransport for Answers {
        async fn post(&self, _: pricing_core::ports::WebhookRequest) -> Response {
            Response::Status {
                status: self.0,
                retry_after: None,
            }
        }
    }

    #[tokio::test]
    async fn a_failed_attempt_names_its_subscription_and_a_delivered_one_does_not() {
        let body = br#"{"id":"evt_1","type":"prices.updated","projectId":"p","subscriptionId":"sub_42","data":{}}"#;
        for (status, expected) in [(500, Some("sub_42".to_owned())), (204, None)] {
            let observed = Observed {
                inner: Answers(status),
                attempt: Arc::default(),
            };
            let request = pricing_core::ports::WebhookRequest {
                url: "http://receiver.test/hook".into(),
                headers: Vec::new(),
                body: body.to_vec(),
            };
            observed.post(request).await;
            let attempt = observed.attempt.lock().unwrap().take().unwrap();
            assert_eq!(attempt.0, status == 204);
            assert_eq!(attempt.2, expected, "status {status}");
        }
        assert_eq!(subscription_of(b"not json"), None);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            label_set(&[("code".into(), "a\"b\\c\nd".into())], None),
            "{code=\"a\\\"b\\\\c\\nd\"}"
        );
    }
}
