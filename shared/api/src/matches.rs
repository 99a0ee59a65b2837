//! Price match rules: price(itemId) = price(sourceItemId) * ratio + offset. A rule that
//! would close a cycle, or give an item a second rule, is a 422 naming the rules involved.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use pricing_core::ids::{ItemId, MatchId};
use pricing_core::money::Money;
use pricing_core::ports::{PriceMatchStore, StoreError};
use pricing_core::pricing::{PriceMatch, validate_matches};
use pricing_core::validate::{Errors, codes, object};
use serde_json::{Value, json};

use crate::app::{App, Ports};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Caller, JsonBody, Path, cursor_id, page_request};
use crate::instances::owned_instance;
use crate::util::{reject_nulls, reject_unknown_fields};

/// Most rules per instance.
pub const MAX_RULES: usize = 1_000;
/// Retries of a rule change that lost a race with another change.
const MAX_CONFLICTS: usize = 5;

/// GET .../priceMatches?cursor=&limit=: the rules in match id order (the order they apply
/// in is their dependencies'), paged as every listing is (before 2026-11-30 one page
/// of every rule, whatever `limit` said). Without `limit` a page holds every rule an
/// instance may have ([`MAX_RULES`]), as the listing always answered: a client that never
/// paged it still reads them all.
pub async fn list<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let mut page = page_request(&query)?;
    if !query.iter().any(|(k, _)| k == "limit") {
        page.limit = MAX_RULES;
    }
    let after = cursor_id::<MatchId>(&page)?;
    let mut set = app
        .ports
        .matches()
        .get_matches(&instance.key())
        .await
        .map_err(ApiError::store("reading price matches"))?;
    set.rules.sort_by(|a, b| a.match_id.cmp(&b.match_id));
    let rest: Vec<&PriceMatch> = set
        .rules
        .iter()
        .filter(|r| after.as_ref().is_none_or(|a| &r.match_id > a))
        .collect();
    let shown = &rest[..rest.len().min(page.limit)];
    let next = (shown.len() < rest.len())
        .then(|| shown.last().map(|r| r.match_id.to_string()))
        .flatten();
    Ok(Json(json!({ "items": shown, "next": next })))
}

fn parse_rule(body: &Value) -> Result<PriceMatch, ApiError> {
    let mut errors = Errors::default();
    let Some(o) = object(body, "", &mut errors) else {
        return Err(ApiError::validation(errors.list));
    };
    reject_unknown_fields(
        &o,
        &["matchId", "itemId", "sourceItemId", "ratio", "offset"],
        &[],
        &mut errors,
    );
    reject_nulls(&o, &[], &mut errors);
    let match_id = o.opt_id::<MatchId>("matchId", &mut errors);
    o.refuse_dot_segment("matchId", &mut errors);
    let item_id = o.req_id::<ItemId>("itemId", &mut errors);
    let source = o.req_id::<ItemId>("sourceItemId", &mut errors);
    let ratio = match o.opt_f64("ratio", &mut errors) {
        Some(r) if !(r.is_finite() && r >= 0.0) => {
            errors.push("/ratio", codes::RANGE, "must be a number >= 0");
            None
        }
        other => other,
    };
    let offset = o.opt_money("offset", false, &mut errors);
    if let (Some(a), Some(b)) = (&item_id, &source)
        && a == b
    {
        errors.push(
            "/sourceItemId",
            codes::RANGE,
            "an item cannot follow itself",
        );
    }
    let (Some(item_id), Some(source_item_id), true) = (item_id, source, errors.is_empty()) else {
        return Err(ApiError::validation(errors.list));
    };
    let match_id = match match_id {
        Some(id) => id,
        None => MatchId::parse(format!("m_{}", ulid::Ulid::new()))
            .map_err(|e| ApiError::internal("generating a match id", &e))?,
    };
    Ok(PriceMatch {
        match_id,
        item_id,
        source_item_id,
        ratio: ratio.unwrap_or(1.0),
        offset: offset.unwrap_or(Money::ZERO),
    })
}

pub async fn create<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id)): Path<(String, String)>,
    JsonBody(body, _share): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let body = body
        .ok_or_else(|| ApiError::invalid_field("", codes::REQUIRED, "a JSON object is required"))?;
    let rule = parse_rule(&body)?;
    let key = instance.key();
    let state = crate::instances::load_state(&app, &key).await?;
    // A removed item is gone for good (its id cannot be registered again), so a new rule
    // naming one could never apply. An item not registered yet may still come.
    for (member, item) in [
        ("itemId", &rule.item_id),
        ("sourceItemId", &rule.source_item_id),
    ] {
        if state.items.get(item).is_some_and(|i| i.removed) {
            return Err(ApiError::unprocessable(format!(
                "item {item} was removed permanently: the rule could never apply"
            ))
            .with_errors(vec![pricing_core::validate::FieldError {
                pointer: format!("/{member}"),
                code: "itemRemoved".to_owned(),
                message: format!("item {item} was removed permanently"),
            }]));
        }
    }
    for conflicts in 0.. {
        let set = app
            .ports
            .matches()
            .get_matches(&key)
            .await
            .map_err(ApiError::store("reading price matches"))?;
        if set.rules.iter().any(|r| r.match_id == rule.match_id) {
            return Err(ApiError::conflict(format!(
                "price match {} already exists",
                rule.match_id
            )));
        }
        if set.rules.len() >= MAX_RULES {
            return Err(ApiError::unprocessable(format!(
                "an instance holds at most {MAX_RULES} price match rules"
            )));
        }
        let mut rules = set.rules.clone();
        rules.push(rule.clone());
        if let Err(e) = validate_matches(&rules, &state) {
            let detail = format!("the rule cannot be added: {e}");
            let mut error = ApiError::unprocessable(detail);
            if let Ok(v) = serde_json::to_value(&e) {
                error = error.with_errors(vec![pricing_core::validate::FieldError {
                    pointer: String::new(),
                    code: v
                        .get("code")
                        .and_then(Value::as_str)
                        .unwrap_or("invalidRule")
                        .to_owned(),
                    message: e.to_string(),
                }]);
            }
            return Err(error);
        }
        match app
            .ports
            .matches()
            .put_matches(&key, &rules, set.version)
            .await
        {
            Ok(()) => {
                tracing::info!(instance = %key, rule = %rule.match_id, "price match created");
                return Ok((
                    StatusCode::CREATED,
                    Json(serde_json::to_value(&rule).unwrap_or_default()),
                ));
            }
            Err(StoreError::Conflict(_)) if conflicts < MAX_CONFLICTS => continue,
            Err(e) => return Err(ApiError::store("writing price matches")(e)),
        }
    }
    unreachable!("the loop returns")
}

pub async fn delete<P: Ports>(
    State(app): State<Arc<App<P>>>,
    caller: Caller,
    Path((project_id, instance_id, match_id)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let instance = owned_instance(&app, &caller, &project_id, &instance_id).await?;
    let key = instance.key();
    for conflicts in 0.. {
        let set = app
            .ports
            .matches()
            .get_matches(&key)
            .await
            .map_err(ApiError::store("reading price matches"))?;
        let rules: Vec<PriceMatch> = set
            .rules
            .iter()
            .filter(|r| r.match_id.as_str() != match_id)
            .cloned()
            .collect();
        if rules.len() == set.rules.len() {
            return Err(ApiError::not_found(format!(
                "price match {match_id} does not exist"
            )));
        }
        match app
            .ports
            .matches()
            .put_matches(&key, &rules, set.version)
            .await
        {
            Ok(()) => return Ok(StatusCode::NO_CONTENT),
            Err(StoreError::Conflict(_)) if conflicts < MAX_CONFLICTS => continue,
            Err(e) => return Err(ApiError::store("writing price matches")(e)),
        }
    }
    unreachable!("the loop returns")
}

/// The rules an item takes part in, for its details.
pub async fn rules_of_item<P: Ports>(
    app: &App<P>,
    key: &pricing_core::ids::InstanceKey,
    item: &ItemId,
) -> ApiResult<Vec<PriceMatch>> {
    let set = app
        .ports
        .matches()
        .get_matches(key)
        .await
        .map_err(ApiError::store("reading price matches"))?;
    Ok(set
        .rules
        .into_iter()
        .filter(|r| &r.item_id == item || &r.source_item_id == item)
        .collect())
}
