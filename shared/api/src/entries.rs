//! Entries: submission (syntactic validation, dedupe, append, wake the processor) and the log.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use pricing_core::ids::InstanceKey;
use pricing_core::model::{AppendOutcome, LogRecord, Message};
use pricing_core::ports::{Enqueue, EntryLog};
use pricing_core::submit::{SubmitError, prepare};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, Path, parse_limit, single_valued};
use crate::instances::owned_instance;
use crate::paging::{Budget, MAX_PAGE_BYTES, json_len};
use crate::util::now;

/// POST .../entries: 200 with a summary; duplicates are reported, never a 409.
#[tracing::instrument(skip_all, fields(project = %project_id, instance = %instance_id))]
pub async fn submit<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let body =
        body.ok_or_else(|| ApiError::invalid_field("/entries", "required", "is required"))?;
    // Only a deployment that holds the signing keys takes entries (on AWS the gateway
    // routes them to the entries function).
    let signer = app.keys.signer().ok_or_else(|| {
        ApiError::internal(
            "submitting entries",
            &"this deployment holds no signing key: the request reached the wrong function",
        )
    })?;
    let submission = prepare(&body, signer, now()).map_err(|e| match e {
        SubmitError::Invalid(errors) => ApiError::validation(errors),
        SubmitError::TooLarge { detail, errors } => ApiError::too_large(detail).with_errors(errors),
    })?;
    let key = instance.key();
    let transaction_ids: Vec<Option<String>> = submission
        .entries
        .iter()
        .map(|e| e.transaction_id.as_ref().map(ToString::to_string))
        .collect();
    let outcomes = app
        .ports
        .log()
        .append(&key, submission.entries)
        .await
        .map_err(ApiError::store("appending entries"))?;
    crate::metrics::entries_submitted(&outcomes);
    let accepted = outcomes
        .iter()
        .filter(|o| matches!(o, AppendOutcome::Accepted { .. }))
        .count();
    if accepted > 0 {
        // The log is durable already; a lost wake-up is repaired by the sweep, so a failure
        // here is logged, not answered as an error (the entries are accepted).
        if let Err(e) = app
            .ports
            .queue()
            .send(&Message::ProcessInstance { key: key.clone() })
            .await
        {
            tracing::warn!(error = %e, "could not enqueue processing; the sweep will pick it up");
        }
    }
    let entries: Vec<Value> = outcomes
        .iter()
        .zip(transaction_ids)
        .enumerate()
        .map(|(index, (outcome, transaction_id))| {
            let (status, sequence) = match outcome {
                AppendOutcome::Accepted { sequence } => ("accepted", sequence),
                AppendOutcome::Duplicate { sequence } => ("duplicate", sequence),
            };
            json!({
                "index": index,
                "transactionId": transaction_id,
                "status": status,
                "sequence": sequence,
            })
        })
        .collect();
    // Debug, like the access log: at thousands of one-entry requests per second an info
    // line each was about 2 % of the server's CPU (docs/performance.md).
    tracing::debug!(received = outcomes.len(), accepted, "entries submitted");
    Ok(Json(json!({
        "received": outcomes.len(),
        "accepted": accepted,
        "duplicates": outcomes.len() - accepted,
        "entries": entries,
    })))
}

/// GET .../entries?after=SEQ&limit=N: the log, each entry in its signed form; a page holds
/// at most `limit` entries and [`MAX_PAGE_BYTES`] of them.
pub async fn log<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    // `cursor` is another name of `after`: one of them, once.
    single_valued(&query, &[&["after", "cursor"], &["limit"]])?;
    let mut after: u64 = 0;
    let mut limit: usize = 100;
    for (k, v) in &query {
        match k.as_str() {
            // The cursor of this listing is the last sequence of the previous page.
            "after" | "cursor" if !v.is_empty() => {
                after = v.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "{k} must be a sequence number (a non-negative integer)"
                    ))
                })?;
            }
            "limit" => limit = parse_limit(v)?,
            _ => {}
        }
    }
    let (items, more) = log_page(&app, &instance.key(), after, limit).await?;
    let next = more
        .then(|| items.last().map(|r| r.sequence.to_string()))
        .flatten();
    Ok(Json(json!({ "items": items, "next": next })))
}

/// Entries read per store call at first; later calls ask for about what the bytes left
/// can hold (a log of 88 KB entries is not read 1,000 at a time for a page of 11).
const FIRST_READ: usize = 50;

/// The entries after `after`: at most `limit` and [`MAX_PAGE_BYTES`] of them (the page
/// stops before the entry that would not fit; `next` continues from there), and whether
/// more follow.
async fn log_page<P: Ports>(
    app: &App<P>,
    key: &InstanceKey,
    after: u64,
    limit: usize,
) -> ApiResult<(Vec<LogRecord>, bool)> {
    let mut budget = Budget::new(MAX_PAGE_BYTES);
    let mut items: Vec<LogRecord> = Vec::new();
    let mut cursor = after;
    let mut want = FIRST_READ.min(limit + 1);
    loop {
        let batch = app
            .ports
            .log()
            .read(key, cursor, want)
            .await
            .map_err(ApiError::store("reading the log"))?;
        let complete = batch.len() < want;
        for record in batch {
            if items.len() == limit || !budget.take(json_len(&record)) {
                return Ok((items, true));
            }
            cursor = record.sequence;
            items.push(record);
        }
        if complete {
            return Ok((items, false));
        }
        // One more than the average entry says the remaining bytes hold, within the count.
        let average = budget.used() / items.len().max(1);
        let room = (MAX_PAGE_BYTES - budget.used().min(MAX_PAGE_BYTES)) / average.max(1);
        want = (room + 1).clamp(1, limit + 1 - items.len());
    }
}
