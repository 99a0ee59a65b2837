//! The HTTP functions' runtime loop: lambda_http's adapter over the shared router, with
//! the event's raw query string made a valid URI query first.
//!
//! lambda_http appends `rawQueryString` to the request URI as it comes and `expect`s the
//! URI to build: a query with a raw space, `<`, `>` or a control character (which API
//! Gateway passes on as the client sent it) panicked the invocation before the router ran,
//! and API Gateway answered a bare 500 instead of the router's 400 problem (so did a raw
//! `"`). Such bytes are percent-encoded here, as a client should have sent them: the
//! router decodes the query, so it reads the same values.

use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, Service};
use lambda_runtime::LambdaEvent;

/// Runs an HTTP function's handler loop over `router` (in place of `lambda_http::run`).
pub async fn run(router: axum::Router) -> Result<(), lambda_http::Error> {
    let mut adapter = Adapter::from(router);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |mut event: LambdaEvent<LambdaRequest>| {
            escape_query(&mut event.payload);
            adapter.call(event)
        },
    ))
    .await
}

/// Percent-encodes the bytes of an API Gateway v2 event's raw query string that a URI
/// query cannot hold as they are.
///
/// The raw path needs nothing: lambda_http builds it through `url::Url`, which encodes
/// what a path cannot hold (the test shows every ASCII byte converting).
pub fn escape_query(request: &mut LambdaRequest) {
    if let LambdaRequest::ApiGatewayV2(event) = request
        && let Some(query) = event.raw_query_string.as_mut()
        && query.bytes().any(needs_escape)
    {
        *query = escaped(query);
    }
}

/// ASCII bytes outside RFC 3986's query characters (unreserved, sub-delims, `:`, `@`,
/// `/`, `?`, and `%` of the encodings already there): controls, space, DEL, `"`, `#`
/// (which would cut the rest off as a fragment; a raw query string has none), `<`, `>`,
/// `[`, `\`, `]`, `^`, `` ` ``, `{`, `|`, `}`. Some of these `http::Uri` takes as they
/// are, but which ones depends on how lambda_http builds the URI; escaping them all
/// changes no value the router reads.
fn needs_escape(b: u8) -> bool {
    !(b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) || !b.is_ascii())
}

fn escaped(query: &str) -> String {
    let mut out = String::with_capacity(query.len() + 8);
    for c in query.chars() {
        match u8::try_from(c) {
            Ok(b) if needs_escape(b) => out.push_str(&format!("%{b:02X}")),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bytes_a_uri_query_refuses_are_escaped() {
        assert_eq!(escaped("cursor=a b"), "cursor=a%20b");
        assert_eq!(escaped("a=<x>&b=#1"), "a=%3Cx%3E&b=%231");
        assert_eq!(escaped("a=\t\u{7f}"), "a=%09%7F");
        assert_eq!(escaped("x={\"a\"}"), "x=%7B%22a%22%7D");
        // What a URI query holds as it is stays as it is (the router reads `%20` and
        // `é` as it did before).
        for kept in [
            "cursor=%20",
            "q=é",
            "a=b&c=d;e:f@g/h?i*j+k,l'(m)!$~",
            "limit=5",
        ] {
            assert_eq!(escaped(kept), kept);
        }
    }

    fn event(raw_query: &str) -> LambdaRequest {
        event_at("/projects", raw_query)
    }

    fn event_at(raw_path: &str, raw_query: &str) -> LambdaRequest {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../infra/events/apigw-v2-submit-entries.json"
        );
        let mut e: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
        e["rawPath"] = raw_path.into();
        e["rawQueryString"] = raw_query.into();
        serde_json::from_value(e).expect("an API Gateway v2 event")
    }

    #[tokio::test]
    async fn a_raw_space_in_the_query_reaches_the_router_escaped() {
        // Unescaped, lambda_http's conversion panics (the invocation fails: a bare 500).
        let raw = event("cursor=a b");
        assert!(std::panic::catch_unwind(|| lambda_http::Request::from(raw)).is_err());
        // Escaped, every ASCII byte of the query converts.
        for b in 0u8..0x80 {
            let mut request = event(&format!("q=a{}b", b as char));
            escape_query(&mut request);
            let converted = std::panic::catch_unwind(|| lambda_http::Request::from(request));
            assert!(converted.is_ok(), "byte {b:#04x}");
            // The path converts as it is (lambda_http encodes it through `url::Url`).
            let request = event_at(&format!("/projects/a{}b", b as char), "");
            let converted = std::panic::catch_unwind(|| lambda_http::Request::from(request));
            assert!(converted.is_ok(), "path byte {b:#04x}");
        }

        let echo = axum::Router::new().fallback(|uri: axum::http::Uri| async move {
            uri.query().unwrap_or_default().to_owned()
        });
        let mut request = event("cursor=a b&x=<y>");
        escape_query(&mut request);
        let response = Adapter::from(echo)
            .call(LambdaEvent::new(
                request,
                lambda_runtime::Context::default(),
            ))
            .await
            .expect("answered");
        let body = serde_json::to_value(&response).expect("a response");
        assert_eq!(body["statusCode"], 200, "{body}");
        assert_eq!(body["body"], "cursor=a%20b&x=%3Cy%3E", "{body}");
    }
}
