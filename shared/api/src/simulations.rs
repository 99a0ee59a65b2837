//! POST /simulations (docs/api.md, "Simulations"): a market scenario (the document of
//! `standalone simulate market --scenario FILE`, PRICING.md) simulated for the pricing
//! models named in `?models=` (default: default, pace, timeBased, tiers, fixed); the
//! answer is the report of `simulate market --json`. Nothing is stored and no project is
//! involved; a token is needed like for every API call.
//!
//! Bounded: the scenario must be within `pricing_simulate::caps::API` (400 naming the
//! field and the cap) and its work within `caps::MAX_WORK` (422 `tooMuchWork` at
//! `/runs`, naming the product). The simulation runs off the async runtime
//! (`spawn_blocking`) on half the cores (at least one), one at a time per process: a
//! request that waits more than [`QUEUE_WAIT`] for the one before it is a 429.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use pricing_core::validate::codes;
use pricing_simulate::NoProgress;
use pricing_simulate::caps::{self, Refusal};
use pricing_simulate::report::Report;
use tokio::sync::Semaphore;

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody};

/// Simulations running at once in this process.
static RUNNING: Semaphore = Semaphore::const_new(1);

/// How long a request waits for the simulation before it.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);

/// `code` of the 422 for a simulation over the work cap.
pub const TOO_MUCH_WORK: &str = "tooMuchWork";

/// Threads of one simulation: half the cores, at least one (the rest keep serving).
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The models of `?models=a,b` (the parameter may also repeat); without the parameter,
/// the default list. A `models` that names none (`?models=`) is refused, as the CLI
/// refuses `--models ''`: it asks for no model, not for the defaults.
fn model_names(query: &[(String, String)]) -> Result<Vec<&str>, ApiError> {
    let given = query.iter().filter(|(k, _)| k == "models");
    let names: Vec<&str> = given
        .clone()
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() && given.count() > 0 {
        return Err(ApiError::bad_request(
            "query parameter models: names no model (leave it out for the default list)",
        ));
    }
    Ok(names)
}

/// A refused request as a problem: 400 naming the field (or the query parameter), 422 for
/// too much work.
pub fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::Invalid(e) => ApiError::invalid_field(&e.pointer(), e.code, e.message),
        Refusal::TooMuchWork(e) => ApiError::rule(&e.pointer(), TOO_MUCH_WORK, e.message),
        Refusal::Models(m) => ApiError::bad_request(format!("query parameter models: {m}")),
    }
}

/// POST /simulations: 200 with the report.
pub async fn run<P: Ports>(
    State(_app): State<Arc<App<P>>>,
    _caller: Caller,
    Query(query): Query<Vec<(String, String)>>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<Json<Report>> {
    let body = body.ok_or_else(|| {
        ApiError::invalid_field(
            "",
            codes::REQUIRED,
            "a scenario (a JSON object, PRICING.md) is required",
        )
    })?;
    let request = caps::request(&body, &model_names(&query)?).map_err(refusal)?;
    let permit = tokio::time::timeout(QUEUE_WAIT, RUNNING.acquire())
        .await
        .ok()
        .and_then(Result::ok)
        .ok_or_else(|| {
            let mut e = ApiError::rate_limited(1);
            e.detail = "another simulation is running on this server; retry shortly".into();
            e
        })?;
    let threads = threads();
    let report = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        Report::of(&request.scenario, &request.models, threads, &NoProgress)
    })
    .await
    .map_err(|e| ApiError::internal("running a simulation", &e))?
    .map_err(|e| ApiError::internal("running a simulation", &e))?;
    tracing::info!(
        scenario = %report.scenario,
        runs = report.runs,
        models = report.models.len(),
        "simulation"
    );
    Ok(Json(report))
}
