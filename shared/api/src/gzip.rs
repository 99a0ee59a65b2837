//! Embedded files kept gzip-compressed (see `build.rs`): sent as they are, with
//! `Content-Encoding: gzip`, to a client that accepts gzip (browsers, curl --compressed,
//! HTTP libraries), and inflated for one that does not.

use std::io::Read;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// Whether `Accept-Encoding` accepts gzip: `gzip` or `x-gzip` with a q-value above 0, else
/// `*` with one (an explicit `gzip;q=0` refuses it whatever `*` says: RFC 9110, 12.5.3),
/// and does not prefer `identity` to it (`gzip;q=0.1, identity;q=1` is answered plain).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let (mut gzip, mut any, mut identity): (Option<f32>, Option<f32>, Option<f32>) =
        (None, None, None);
    for coding in headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .find_map(|p| p.strip_prefix("q="))
            .map_or(1.0, |q| q.trim().parse::<f32>().unwrap_or(0.0));
        match name.as_str() {
            "gzip" | "x-gzip" => gzip = Some(gzip.map_or(q, |g| g.max(q))),
            "*" => any = Some(q),
            "identity" => identity = Some(q),
            _ => {}
        }
    }
    gzip.or(any)
        .is_some_and(|q| q > 0.0 && identity.is_none_or(|i| q >= i))
}

/// The file `gz` (gzip) answered with `content_type` to a request with `headers`.
pub fn respond(gz: &'static [u8], content_type: &'static str, headers: &HeaderMap) -> Response {
    let mut response = if accepts_gzip(headers) {
        let mut r = (
            [(header::CONTENT_TYPE, content_type)],
            Bytes::from_static(gz),
        )
            .into_response();
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        ([(header::CONTENT_TYPE, content_type)], inflate(gz)).into_response()
    };
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// The bytes of an embedded gzip file (built by build.rs, so it inflates; an empty body
/// otherwise, which no test would let pass).
pub fn inflate(gz: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(gz.len() * 4);
    match flate2::read::GzDecoder::new(gz).read_to_end(&mut out) {
        Ok(_) => Bytes::from(out),
        Err(e) => {
            tracing::error!(error = %e, "an embedded file does not inflate");
            Bytes::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(accept).unwrap_or(HeaderValue::from_static("")),
        );
        h
    }

    #[test]
    fn gzip_is_accepted_unless_refused() {
        for yes in [
            "gzip",
            "gzip, deflate, br",
            "br;q=1.0, GZIP;q=0.5",
            "*",
            "x-gzip",
            "gzip, identity",
            "gzip;q=1, identity;q=0.5",
        ] {
            assert!(accepts_gzip(&with(yes)), "{yes}");
        }
        for no in [
            "",
            "*, gzip;q=0",
            "gzip;q=0, *",
            "identity",
            "br, deflate",
            "gzip;q=0",
            "gzip; q=0.0",
            "gzipped",
            "gzip;q=0.1, identity;q=1",
            "*;q=0.5, identity",
        ] {
            assert!(!accepts_gzip(&with(no)), "{no}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
