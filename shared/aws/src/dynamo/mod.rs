//! DynamoDB adapter: every storage port on the stack's single table.
//!
//! Key layout (docs/aws.md has the full table and the reasoning):
//!
//! | pk | sk | what |
//! |---|---|---|
//! | `P#{pid}` | `PROJECT` | project (`record`, `tenant`) |
//! | `T#{tenant}` | `P#{pid}` | the tenant's listing copy of the project |
//! | `P#{pid}` | `I#{iid}` | instance configuration |
//! | `I#{pid}/{iid}` | `HEAD` | state header (`record`, `applied_seq`, `rev`) |
//! | `I#{pid}/{iid}` | `LOG` | log head (`last_seq`, `lease`, `dirty`); `gsi1pk`/`gsi1sk` = backlog marker |
//! | `I#{pid}/{iid}#L{0..7}` | `E#{last seq:020}` | log segment: compressed entries of one block (visible up to `last_seq`) |
//! | `I#{pid}/{iid}#T{0..15}` | `T#{transactionId}` | dedupe marker (`seq`, `lease`?) |
//! | `I#{pid}/{iid}` | `APPEND#{lease}` | commit record of an append of several transactions |
//! | `I#{pid}/{iid}` | `ITEM#{id}`, `PROD#{id}` | item and product state |
//! | `I#{pid}/{iid}` | `EVENT#{id}` | event (`record`, `batch`, `idx`) |
//! | `I#{pid}/{iid}` | `EVLOG#{batch:020}` | the ids of the events one write stored, in order |
//! | `I#{pid}/{iid}` | `EVENTS` | batches `n`, `last_len`, dispatch mark; outbox index entry |
//! | `I#{pid}/{iid}` | `~P#...`, `~M#SET` | prices, price history, match rules (see `prices.rs`) |
//! | `I#{pid}/{iid}` | `SCHED` | the scheduler's index entry of an active instance (see `schedule.rs`) |
//! | `SCHEDULER` | `T#{tenant}`, `CURSOR#{step}` | the scheduler's tenant directory and cursors |
//! | `P#{pid}` | `SUB#{sid}`, `SUBN#{scope}`, `SUBL#{scope}/{ord}` | subscriptions (see `subscriptions.rs`) |
//! | `D#{webhookId}` | `DELIVERY`, `EVENT` | a delivery's state and event (see `deliveries.rs`) |
//! | `DL#{pid}/{sid}` | `{created}#{position}#{webhookId}` | a subscription's delivery listing |
//! | `T#{tenant}` | `PROJECTS` | the tenant's project counter (quota, see `quotas.rs`) |
//! | `P#{pid}` | `INSTANCES` | the project's instance counter (quota) |
//! | `RL#{tenant}` | `W#{width ms}/{index}` | one rate-limit window's request count (`n`, `expires_at` TTL; see `limiter.rs`) |
//!
//! The one index `gsi1` holds sparse entries under distinct partition values:
//! `BACKLOG#{0..7}` (on `LOG`), `OUTBOX#{0..7}` (on `EVENTS`), `DUE#{0..7}` (on
//! `DELIVERY`) and `ACTIVE#{tenant}` (on `SCHED` items, the scheduler's index, see
//! `schedule.rs`).
//!
//! Records are JSON text in a `record` attribute beside the key and number attributes that
//! conditions and queries need.

mod backlog;
mod deliveries;
mod events;
mod instances;
mod keys;
mod limiter;
mod log;
mod prices;
mod projects;
mod quotas;
mod schedule;
mod state;
mod subscriptions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, TransactWriteItem};
use pricing_core::ports::{StoreError, StoreResult};

use crate::error::{corrupt, store_error};

pub use keys::{BACKLOG_SHARDS, DUE_SHARDS, OUTBOX_SHARDS};
pub use limiter::{DynamoRateLimit, TTL_ATTRIBUTE};

/// One DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Attempts of an optimistic write (append chunk, commit) that keeps losing to others.
const MAX_ATTEMPTS: u32 = 40;
/// Keys per BatchGetItem call (the API's limit).
const BATCH_GET_KEYS: usize = 100;

/// The storage ports on one DynamoDB table. Cheap to clone (the client is shared).
#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: Arc<str>,
    /// What the written items' TTL (`expires_at`) follows (see [`DynamoStore::with_retention`]).
    retention: pricing_core::retention::Retention,
}

impl std::fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: Arc::from(table.into()),
            retention: pricing_core::retention::Retention::default(),
        }
    }

    /// The retention policy (issue 12, item 3; docs/retention.md): the
    /// items this store writes of each class carry the table's TTL attribute
    /// (`expires_at`, epoch seconds) when it keeps them no longer; DynamoDB deletes them
    /// after that time. The default is `Retention::default()`.
    pub fn with_retention(mut self, retention: pricing_core::retention::Retention) -> Self {
        self.retention = retention;
        self
    }

    /// The retention policy the written items follow.
    pub fn retention(&self) -> &pricing_core::retention::Retention {
        &self.retention
    }

    /// The TTL attribute of an item of `class` made at `at`, if the class expires.
    pub(crate) fn expiry(
        &self,
        class: pricing_core::retention::Class,
        at: pricing_core::time::Timestamp,
    ) -> Option<(&'static str, AttributeValue)> {
        self.retention
            .expires_at(class, at)
            .map(|t| (TTL_ATTRIBUTE, AttributeValue::N(t.to_string())))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A strongly consistent GetItem.
    pub(crate) async fn get(&self, op: &str, pk: String, sk: &str) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .key(keys::PK, s(pk))
            .key(keys::SK, s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error(op, e))?;
        Ok(out.item)
    }

    /// A strongly consistent GetItem of some attributes only.
    pub(crate) async fn get_projected(
        &self,
        op: &str,
        pk: String,
        sk: &str,
        attributes: &[&str],
    ) -> StoreResult<Option<Item>> {
        let (expression, names) = projection(attributes);
        let out = self
            .client
            .get_item()
            .table_name(&*self.table)
            .key(keys::PK, s(pk))
            .key(keys::SK, s(sk))
            .projection_expression(expression)
            .set_expression_attribute_names(Some(names))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error(op, e))?;
        Ok(out.item)
    }

    /// Strongly consistent BatchGetItem of any number of keys (chunks of 100, unprocessed
    /// keys retried). The items come back in no particular order.
    pub(crate) async fn batch_get(
        &self,
        op: &str,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<Item>> {
        self.batch_get_projected(op, keys, &[]).await
    }

    /// [`Self::batch_get`] of some attributes only (all when `attributes` is empty).
    pub(crate) async fn batch_get_projected(
        &self,
        op: &str,
        keys: Vec<(String, String)>,
        attributes: &[&str],
    ) -> StoreResult<Vec<Item>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let mut pending: Vec<Item> = chunk
                .iter()
                .map(|(pk, sk)| {
                    HashMap::from([
                        (keys::PK.to_owned(), s(pk.clone())),
                        (keys::SK.to_owned(), s(sk.clone())),
                    ])
                })
                .collect();
            let mut attempt = 0;
            while !pending.is_empty() {
                let mut request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true);
                if !attributes.is_empty() {
                    let (expression, names) = projection(attributes);
                    request = request
                        .projection_expression(expression)
                        .set_expression_attribute_names(Some(names));
                }
                let request = request
                    .build()
                    .map_err(|e| StoreError::Failed(format!("{op}: {e}")))?;
                let result = self
                    .client
                    .batch_get_item()
                    .request_items(&*self.table, request)
                    .send()
                    .await
                    .map_err(|e| store_error(op, e))?;
                if let Some(mut responses) = result.responses {
                    out.extend(responses.remove(&*self.table).unwrap_or_default());
                }
                if let Some(mut unprocessed) = result.unprocessed_keys
                    && let Some(rest) = unprocessed.remove(&*self.table)
                {
                    pending = rest.keys;
                }
                if !pending.is_empty() {
                    attempt += 1;
                    if attempt > MAX_ATTEMPTS {
                        return Err(StoreError::Unavailable(format!(
                            "{op}: BatchGetItem kept leaving keys unprocessed"
                        )));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Ok(out)
    }

    /// Runs a query to its end or until `max` items (strongly consistent unless on an
    /// index).
    pub(crate) async fn query(&self, op: &str, mut q: Query) -> StoreResult<Vec<Item>> {
        let mut out = Vec::new();
        let max = q.max;
        loop {
            let remaining = max.map(|m| m.saturating_sub(out.len()));
            if remaining == Some(0) {
                break;
            }
            q.max = remaining;
            let (items, next) = self.query_page(op, &q).await?;
            out.extend(items);
            match next {
                Some(k) => q.start = Some(k),
                None => break,
            }
        }
        Ok(out)
    }

    /// One page of a query (`max` items at most) and the key to continue after, if any.
    pub(crate) async fn query_page(
        &self,
        op: &str,
        q: &Query,
    ) -> StoreResult<(Vec<Item>, Option<Item>)> {
        let mut req = self
            .client
            .query()
            .table_name(&*self.table)
            .key_condition_expression(&q.condition)
            .set_expression_attribute_values(Some(q.values.clone()))
            .set_exclusive_start_key(q.start.clone())
            .scan_index_forward(q.forward)
            .consistent_read(q.index.is_none());
        if let Some(index) = q.index {
            req = req.index_name(index);
        }
        if let Some(n) = q.max {
            req = req.limit(i32::try_from(n).unwrap_or(i32::MAX));
        }
        let page = req.send().await.map_err(|e| store_error(op, e))?;
        let next = page.last_evaluated_key.filter(|k| !k.is_empty());
        Ok((page.items.unwrap_or_default(), next))
    }

    /// One TransactWriteItems call. `Ok(Err(reasons))` when it was cancelled for reasons
    /// an optimistic writer handles (failed conditions, conflicting transactions): one
    /// reason code per action, `None` for actions that were fine. Other cancellations
    /// and errors are mapped onto `StoreError`.
    pub(crate) async fn transact(
        &self,
        op: &str,
        actions: Vec<TransactWriteItem>,
    ) -> StoreResult<Result<(), Vec<Option<String>>>> {
        // A token per logical call: the SDK's own retries of this request are idempotent.
        let token = ulid::Ulid::new().to_string();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .client_request_token(token)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Ok(())),
            Err(e) => e,
        };
        if let Some(TransactWriteItemsError::TransactionCanceledException(cancel)) =
            err.as_service_error()
        {
            let reasons: Vec<Option<String>> = cancel
                .cancellation_reasons()
                .iter()
                .map(|r| r.code().filter(|c| *c != "None").map(str::to_owned))
                .collect();
            let handled = reasons
                .iter()
                .flatten()
                .all(|c| matches!(c.as_str(), "ConditionalCheckFailed" | "TransactionConflict"));
            if handled && reasons.iter().any(Option::is_some) {
                return Ok(Err(reasons));
            }
            let throttled = reasons.iter().flatten().any(|c| {
                matches!(
                    c.as_str(),
                    "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded"
                )
            });
            if throttled {
                return Err(StoreError::Unavailable(format!(
                    "{op}: transaction throttled: {reasons:?}"
                )));
            }
        }
        Err(store_error(op, err))
    }
}

/// A query of [`DynamoStore::query`].
pub(crate) struct Query {
    pub index: Option<&'static str>,
    pub condition: String,
    pub values: HashMap<String, AttributeValue>,
    pub start: Option<Item>,
    pub max: Option<usize>,
    /// Ascending sort key order (the default); `false` reads descending.
    pub forward: bool,
}

impl Query {
    pub(crate) fn new(condition: impl Into<String>) -> Self {
        Query {
            index: None,
            condition: condition.into(),
            values: HashMap::new(),
            start: None,
            max: None,
            forward: true,
        }
    }

    pub(crate) fn value(mut self, name: &str, v: AttributeValue) -> Self {
        self.values.insert(name.to_owned(), v);
        self
    }

    pub(crate) fn max(mut self, max: usize) -> Self {
        self.max = Some(max);
        self
    }

    /// Continue after this key (it need not exist).
    pub(crate) fn after(mut self, pk: String, sk: String) -> Self {
        self.start = Some(HashMap::from([
            (keys::PK.to_owned(), s(pk)),
            (keys::SK.to_owned(), s(sk)),
        ]));
        self
    }
}

/// A projection expression of `attributes` with an alias each (`#a0, #a1, ...`), so that
/// reserved words (`batch`, ...) may be named.
fn projection(attributes: &[&str]) -> (String, HashMap<String, String>) {
    let mut names = HashMap::with_capacity(attributes.len());
    let mut aliases = Vec::with_capacity(attributes.len());
    for (i, a) in attributes.iter().enumerate() {
        let alias = format!("#a{i}");
        names.insert(alias.clone(), (*a).to_owned());
        aliases.push(alias);
    }
    (aliases.join(", "), names)
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A string attribute; `Failed` when missing or not a string.
pub(crate) fn get_s<'a>(op: &str, item: &'a Item, name: &str) -> StoreResult<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        other => Err(corrupt(
            op,
            format!("attribute {name} is not a string: {other:?}"),
        )),
    }
}

/// A non-negative integer attribute, `None` when missing.
pub(crate) fn get_n_opt(op: &str, item: &Item, name: &str) -> StoreResult<Option<u64>> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v
            .parse()
            .map(Some)
            .map_err(|e| corrupt(op, format!("attribute {name} = {v:?}: {e}"))),
        Some(other) => Err(corrupt(
            op,
            format!("attribute {name} is not a number: {other:?}"),
        )),
    }
}

pub(crate) fn get_n(op: &str, item: &Item, name: &str) -> StoreResult<u64> {
    get_n_opt(op, item, name)?.ok_or_else(|| corrupt(op, format!("attribute {name} is missing")))
}

/// The JSON record of an item.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(op: &str, item: &Item) -> StoreResult<T> {
    let record = get_s(op, item, keys::RECORD)?;
    serde_json::from_str(record).map_err(|e| {
        let sk = item.get(keys::SK).and_then(|v| v.as_s().ok());
        corrupt(op, format!("record {sk:?} does not decode: {e}"))
    })
}

pub(crate) fn encode<T: serde::Serialize>(op: &str, value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Failed(format!("{op}: encoding: {e}")))
}

/// Builder errors only come from a missing required field: a bug here, not a runtime
/// condition, but reported rather than panicking.
pub(crate) fn built<T, E: std::fmt::Display>(op: &str, r: Result<T, E>) -> StoreResult<T> {
    r.map_err(|e| StoreError::Failed(format!("{op}: building the request: {e}")))
}

/// Random backoff before retrying an optimistic write: up to 5 ms * 2^attempt, at most
/// 250 ms (full jitter).
pub(crate) async fn backoff(attempt: u32) {
    let cap_us: u64 = (5_000u64 << attempt.min(6)).min(250_000);
    let random = u64::try_from(ulid::Ulid::new().random() & u128::from(u64::MAX)).unwrap_or(0);
    tokio::time::sleep(Duration::from_micros(random % cap_us.max(1))).await;
}

/// Whether a reason list says the action at `index` failed its condition.
pub(crate) fn failed_at(reasons: &[Option<String>], index: usize) -> bool {
    reasons
        .get(index)
        .and_then(|r| r.as_deref())
        .is_some_and(|c| c == "ConditionalCheckFailed")
}

/// How many actions of a cancelled transaction failed (for logs).
pub(crate) fn failed_count(reasons: &[Option<String>]) -> usize {
    reasons.iter().filter(|r| r.is_some()).count()
}

/// What a single-item conditional write did: `Ok(true)` written, `Ok(false)` its
/// condition did not hold, else the store error of `op`.
pub(crate) fn condition_held<T, E>(
    op: &str,
    result: Result<
        T,
        aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    >,
) -> StoreResult<bool>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_condition_failed(&e) => Ok(false),
        Err(e) => Err(crate::error::store_error(op, e)),
    }
}

/// A ConditionalCheckFailed of a single-item write.
pub(crate) fn is_condition_failed<E>(
    err: &aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> bool
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
{
    crate::error::code(err) == Some("ConditionalCheckFailedException")
}
