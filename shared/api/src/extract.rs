//! Extractors: the caller, JSON bodies and paging, each failing with a problem response.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
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
        let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
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
        // A body that is announced is judged by its media type before it is read (and
        // before `100 Continue`): a client was made to send 5 MiB to hear 415.
        let announced = declared.map_or_else(
            || req.headers().contains_key(header::TRANSFER_ENCODING),
            |n| n > 0,
        );
        if announced {
            json_media_type(content_type.as_ref())?;
        }
        let bytes = read_body(req.into_body(), limit, timeout)
            .await
            .map_err(|failure| match failure {
                BodyFailure::TooLarge => {
                    ApiError::too_large(format!("the body may hold at most {limit} bytes"))
                }
                BodyFailure::TimedOut => ApiError::body_timeout(timeout),
                BodyFailure::Broken => ApiError::broken_body(),
            })?;
        if bytes.is_empty() {
            return Ok(JsonBody(None, BodyShare::none()));
        }
        json_media_type(content_type.as_ref())?;
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

/// Whether a request's `Content-Type` says JSON: `application/json` or a `+json` type,
/// in UTF-8 (RFC 8259 section 8.1: a `charset` parameter, if any, is UTF-8).
fn json_media_type(content_type: Option<&HeaderValue>) -> Result<(), ApiError> {
    let Some(value) = content_type else {
        return Err(ApiError::unsupported_media_type(
            "the body must be application/json (set Content-Type)",
        ));
    };
    let Some(essence) = value.to_str().ok().and_then(media_type_essence) else {
        return Err(ApiError::unsupported_media_type(
            "the Content-Type does not read as one media type (type/subtype and parameters, in ASCII); send application/json",
        ));
    };
    if essence != "application/json"
        && !(essence.starts_with("application/") && essence.ends_with("+json"))
    {
        return Err(ApiError::unsupported_media_type(format!(
            "the body must be application/json, not {essence}"
        )));
    }
    let charset = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(';'))
        .into_iter()
        .flat_map(|(_, parameters)| parameters.split(';'))
        .filter_map(|p| p.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("charset"))
        .map(|(_, v)| v.trim().trim_matches('"').to_ascii_lowercase());
    match charset.as_deref() {
        None | Some("utf-8" | "utf8") => Ok(()),
        Some(other) => Err(ApiError::unsupported_media_type(format!(
            "a JSON body is UTF-8, not {other}"
        ))),
    }
}

/// Why a request body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFailure {
    /// More than the limit.
    TooLarge,
    /// Not all there within the timeout.
    TimedOut,
    /// Its framing is broken: a chunk that does not read, a connection closed before the
    /// declared length (a 413 said it was too large).
    Broken,
}

/// A request body of at most `limit` bytes, read within `timeout`.
pub async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<axum::body::Bytes, BodyFailure> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(BodyFailure::TimedOut),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                BodyFailure::TooLarge
            } else {
                BodyFailure::Broken
            })
        }
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

    /// A body larger than the limit is too large; one whose stream fails (broken
    /// chunked framing, a connection closed early) is broken, not too large (an outside
    /// probe got 413 for a two-byte body with a bad chunk).
    #[tokio::test]
    async fn a_body_is_too_large_broken_or_late() {
        let second = Duration::from_secs(1);
        assert_eq!(
            read_body(Body::from("{}"), 10, second).await.as_deref(),
            Ok(&b"{}"[..])
        );
        assert_eq!(
            read_body(Body::from("x".repeat(11)), 10, second).await,
            Err(BodyFailure::TooLarge)
        );
        let broken = futures_util::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("invalid chunk size")),
        ]);
        assert_eq!(
            read_body(Body::from_stream(broken), 10, second).await,
            Err(BodyFailure::Broken)
        );
        let never = futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
        assert_eq!(
            read_body(Body::from_stream(never), 10, Duration::from_millis(10)).await,
            Err(BodyFailure::TimedOut)
        );
    }

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
