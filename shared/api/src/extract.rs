//! Extractors: the caller, JSON bodies and paging, each failing with a problem response.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use pricing_core::document::ParseError;
use pricing_core::ids::TenantId;
use pricing_core::limits::retry_after_secs;
use pricing_core::model::PageRequest;
use pricing_core::ports::Admission;
use pricing_core::time::Timestamp;
use pricing_core::validate::codes;
use serde_json::Value;

use crate::app::{App, Ports};
use crate::error::ApiError;

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantId,
}

impl<P: Ports> FromRequestParts<Arc<App<P>>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App<P>>) -> Result<Self, ApiError> {
        let tenant = app.auth.authenticate(parts)?;
        if let Some(limiter) = &app.rate_limit {
            let admission = limiter
                .admit(&tenant, Timestamp::now())
                .await
                .map_err(ApiError::store("checking the rate limit"))?;
            if let Admission::Limited { retry_after } = admission {
                tracing::debug!(%tenant, "request over the tenant's rate limit");
                return Err(ApiError::rate_limited(retry_after_secs(retry_after)));
            }
        }
        Ok(Caller { tenant })
    }
}

/// Path parameters, like axum's `Path`, failing with a problem response: a segment that
/// does not decode (not UTF-8 once percent-decoded) names no resource, so 404.
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError::not_found(format!(
                "no such resource: {}",
                rejection.body_text()
            ))),
        }
    }
}

/// A JSON body: `application/json` (or `+json`), at most the body limit, valid JSON.
/// An empty body reads as `None`. The [`BodyShare`] is the body's share of the bytes
/// parsed at once: keep it for as long as the value lives (a handler binds it as
/// `JsonBody(body, _share)`).
pub struct JsonBody(pub Option<Value>, pub BodyShare);

/// The body bytes of the large requests (over [`LARGE_BODY_BYTES`]) whose JSON is parsed
/// or being handled at once, in KiB. A JSON value takes far more memory than its text: a
/// body of many small members (an outside probe's 4.6 MB of
/// `{"a":[1,2,3,{"b":"xxxxxxxx"}]}`) took ~450 MB while it was parsed and handled (a
/// `serde_json::Map` is a B-tree whose smallest node holds 11 members), and six such
/// requests at once ~0.9 GB. With this budget a process holds at most ~8 MiB of large
/// bodies as values: two at the 5 MiB limit wait for each other. Smaller bodies take no
/// share and never wait (the semaphore serves its waiters in order, so a small request
/// queued behind a large one would wait for it): a 500-entry request is ~100 KiB.
static BODY_BUDGET_KIB: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8 * 1024);

/// A body larger than this takes a share of [`BODY_BUDGET_KIB`] and is parsed on the
/// blocking pool, not on a runtime worker (a 5 MiB body of small members takes 0.3 to
/// 1.3 s of CPU to parse).
const LARGE_BODY_BYTES: usize = 256 * 1024;

/// A large request body's share of [`BODY_BUDGET_KIB`], given back when dropped.
pub struct BodyShare {
    _permit: Option<tokio::sync::SemaphorePermit<'static>>,
}

impl BodyShare {
    /// No share (no body, or a body not counted).
    pub fn none() -> Self {
        BodyShare { _permit: None }
    }

    /// Waits for `bytes`' share of the budget (at least 1 KiB, at most all of it).
    async fn of(bytes: usize) -> Self {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, 8 * 1024);
        // The semaphore is never closed, so acquiring cannot fail.
        BodyShare {
            _permit: BODY_BUDGET_KIB.acquire_many(kib).await.ok(),
        }
    }
}

/// Parses a body: duplicate members refused, then the depth checked.
fn parse_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let value = pricing_core::document::parse_unique(bytes).map_err(|e| match e {
        ParseError::Json(e) => {
            ApiError::invalid_field("", codes::JSON, format!("is not valid JSON: {e}"))
        }
        ParseError::Duplicate(e) => {
            ApiError::invalid_field("", codes::DUPLICATE_MEMBER, e.to_string())
        }
    })?;
    let depth = pricing_core::document::depth(&value);
    if depth > MAX_BODY_DEPTH {
        return Err(ApiError::invalid_field(
            "",
            pricing_core::validate::codes::TOO_DEEP,
            format!("the body is {depth} levels deep; at most {MAX_BODY_DEPTH}"),
        ));
    }
    Ok(value)
}

impl<P: Ports> FromRequest<Arc<App<P>>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, app: &Arc<App<P>>) -> Result<Self, ApiError> {
        // Two media types: a proxy that reads the last and this reader the first would
        // disagree on what the body is (as for two Authorization headers).
        if req
            .headers()
            .get_all(header::CONTENT_TYPE)
            .iter()
            .nth(1)
            .is_some()
        {
            return Err(ApiError::unsupported_media_type(
                "the request has several Content-Type headers; send one",
            ));
        }
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().ok().and_then(media_type_essence));
        let (limit, timeout) = (app.limits.max_body_bytes, app.limits.body_timeout);
        // A body declared larger than the limit is refused before it is read (and before
        // a client that asked `Expect: 100-continue` is told to send it).
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::too_large(format!(
                "the body may hold at most {limit} bytes"
            )));
        }
        let bytes = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit))
            .await
            .map_err(|_| ApiError::body_timeout(timeout))?
            .map_err(|_| ApiError::too_large(format!("the body may hold at most {limit} bytes")))?;
        if bytes.is_empty() {
            return Ok(JsonBody(None, BodyShare::none()));
        }
        match content_type.as_ref().map(|c| c.as_deref()) {
            Some(Some("application/json")) => {}
            Some(Some(ct)) if ct.starts_with("application/") && ct.ends_with("+json") => {}
            Some(None) => {
                return Err(ApiError::unsupported_media_type(
                    "the Content-Type is not one media type (type/subtype and parameters); send application/json",
                ));
            }
            Some(Some(other)) => {
                return Err(ApiError::unsupported_media_type(format!(
                    "the body must be application/json, not {other}"
                )));
            }
            None => {
                return Err(ApiError::unsupported_media_type(
                    "the body must be application/json (set Content-Type)",
                ));
            }
        }
        if bytes.len() <= LARGE_BODY_BYTES {
            return Ok(JsonBody(Some(parse_body(&bytes)?), BodyShare::none()));
        }
        let share = BodyShare::of(bytes.len()).await;
        // The share goes into the parse and comes back with the value: a client that
        // hangs up drops this future, not the parse, which holds its share until it ends.
        let (value, share) = tokio::task::spawn_blocking(move || (parse_body(&bytes), share))
            .await
            .map_err(|e| ApiError::internal("parsing a request body", &e))?;
        Ok(JsonBody(Some(value?), share))
    }
}

/// The essence of a `Content-Type` value (`type/subtype`, in lower case: media types are
/// case-insensitive, RFC 9110 section 8.3.1), or `None` when the value is not one media
/// type: a type and subtype that are tokens, then `;`-separated parameters. A comma
/// outside a quoted parameter value joins two values into one header (a proxy may read
/// the other one), and is refused like two `Content-Type` headers.
pub fn media_type_essence(value: &str) -> Option<String> {
    let is_token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let (essence, parameters) = value.split_once(';').unwrap_or((value, ""));
    let (kind, subtype) = essence.trim().split_once('/')?;
    if !is_token(kind) || !is_token(subtype) {
        return None;
    }
    let mut quoted = false;
    let mut escaped = false;
    for c in parameters.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => return None,
            _ => {}
        }
    }
    (!quoted).then(|| essence.trim().to_ascii_lowercase())
}

/// How deep a request body may nest. Whatever a body holds is stored inside records a few
/// levels deeper (entries, events), and every stored record must decode again (serde_json
/// takes at most 127 levels); the documents inside are bounded at 32 levels on their
/// own, with a pointer to the field.
pub const MAX_BODY_DEPTH: usize = 64;

/// Largest page of any listing.
pub const MAX_PAGE: usize = 1_000;

/// A `limit` query value: an integer from 1 to [`MAX_PAGE`].
pub fn parse_limit(v: &str) -> Result<usize, ApiError> {
    v.parse()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!("limit must be an integer from 1 to {MAX_PAGE}"))
        })
}

/// Refuses a repeated single-valued query parameter: 400 naming it. Each group lists the
/// names of one parameter (`&["after", "cursor"]`: two names of one); two names of a group
/// given together are a 400 naming both. Repeatable parameters (`instanceId` of
/// instancePrices, `type` of events, `models`) are in no group. Since 2026-11-30; before,
/// the last value was taken (the first for `productId`), the others ignored.
pub fn single_valued(query: &[(String, String)], groups: &[&[&str]]) -> Result<(), ApiError> {
    for names in groups {
        let mut given = query
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| names.contains(k));
        if let (Some(first), Some(second)) = (given.next(), given.next()) {
            return Err(ApiError::bad_request(if first == second {
                format!("query parameter {first} may be given only once")
            } else {
                format!("query parameters {first} and {second} mean the same: give one of them")
            }));
        }
    }
    Ok(())
}

/// A 400 for a cursor the listing could not have handed out.
pub fn bad_cursor(cursor: &str) -> ApiError {
    ApiError::bad_request(format!("cursor {cursor} is not a cursor of this listing"))
}

/// The page's cursor read as the id a keyset listing pages by (its `next` is the last id
/// it listed): text that is not such an id is a 400, as every listing's cursor is (since
/// 2026-11-30; before, projects, instances and subscriptions took any text as a position,
/// and a mistyped cursor ended the listing with an empty page).
pub fn cursor_id<T: pricing_core::ids::ParseId>(page: &PageRequest) -> Result<Option<T>, ApiError> {
    page.cursor
        .as_deref()
        .map(|c| T::parse_id(c).map_err(|_| bad_cursor(c)))
        .transpose()
}

/// `?cursor=&limit=` with limit 1..=1000 (default 100), each at most once.
pub fn page_request(query: &[(String, String)]) -> Result<PageRequest, ApiError> {
    single_valued(query, &[&["cursor"], &["limit"]])?;
    let mut page = PageRequest {
        cursor: None,
        limit: 100,
    };
    for (k, v) in query {
        match k.as_str() {
            "cursor" if !v.is_empty() => page.cursor = Some(v.clone()),
            "limit" => page.limit = parse_limit(v)?,
            _ => {}
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_content_type_is_one_media_type() {
        let essence = media_type_essence;
        for (value, expected) in [
            ("application/json", Some("application/json")),
            ("Application/JSON; charset=UTF-8", Some("application/json")),
            ("application/json;charset=utf-8;", Some("application/json")),
            (
                " application/merge-patch+json ",
                Some("application/merge-patch+json"),
            ),
            ("application/json; x=\"a,b\"", Some("application/json")),
            ("application/json; x=\"a\\\",b\"", Some("application/json")),
            ("application/json, text/plain", None),
            ("application/json; charset=utf-8, text/plain", None),
            ("application/json; x=\"open", None),
            ("json", None),
            ("application/", None),
            ("application/json x", None),
            ("", None),
        ] {
            assert_eq!(essence(value).as_deref(), expected, "{value}");
        }
    }

    /// Large bodies share the budget: with all of it held, another waits until it is given
    /// back (the router's test shows only that such requests are all answered).
    #[tokio::test]
    async fn a_large_body_waits_for_its_share_of_the_budget() {
        let all = BodyShare::of(8 * 1024 * 1024).await;
        let waited =
            tokio::time::timeout(Duration::from_millis(100), BodyShare::of(300 * 1024)).await;
        assert!(waited.is_err(), "the budget is held");
        drop(all);
        let got = tokio::time::timeout(Duration::from_secs(5), BodyShare::of(300 * 1024)).await;
        assert!(got.is_ok(), "given back, it is shared again");
    }
}
