//! The web console (issue 14): static assets under `/console`, embedded in the binary.
//!
//! The console is a small front-end of plain ES modules (`shared/api/console/`) that calls
//! the public API with the user's token, so it can do nothing a client cannot. Its assets
//! need no token; the API calls carry one. Every asset is served with its content type, a
//! strict Content-Security-Policy (scripts, styles and connections to this origin only; no
//! inline script or style element, no frames, no form posts) and `nosniff`.

use crate::extract::Path;
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The policy of every console response. `connect-src 'self'`: the console talks to the
/// API it was served by and nowhere else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its path under `/console/`, content type and bytes (gzip, see
/// build.rs).
struct Asset {
    path: &'static str,
    content_type: &'static str,
    gz: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            gz: include_bytes!(concat!(env!("OUT_DIR"), "/console/", $path, ".gz")),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the console. A file not listed here is a 404.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("auth.js", JS),
    asset!("dom.js", JS),
    asset!("pages/projects.js", JS),
    asset!("pages/instance.js", JS),
    asset!("pages/item.js", JS),
    asset!("pages/product.js", JS),
    asset!("pages/subscriptions.js", JS),
    asset!("pages/rejections.js", JS),
    asset!("pages/simulation.js", JS),
    asset!("vendor/uPlot.esm.js", JS),
    asset!("vendor/uPlot.min.css", CSS),
    asset!("vendor/uPlot.LICENSE", "text/plain; charset=utf-8"),
];

/// Sign-in with a hosted authorization server (the Cognito hosted UI on AWS): the
/// authorization code grant with PKCE, for a public client. Read from the environment of
/// the process that serves the console (the management-api function; the standalone too):
/// `CONSOLE_AUTH_URL` (the server's base URL, e.g. `https://x.auth.eu-west-1.amazoncognito.com`;
/// `/oauth2/authorize` and `/oauth2/token` below it), `CONSOLE_CLIENT_ID`, and optionally
/// `CONSOLE_REDIRECT_URI` (default: the console's own address, `https://API/console/`) and
/// `CONSOLE_SCOPE` (default `openid pricing/api`). Without a URL and a client id there is
/// none and the console offers the client-credentials and pasted-token forms only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedSignIn {
    pub auth_url: String,
    pub client_id: String,
    pub redirect_uri: Option<String>,
    pub scope: String,
}

impl HostedSignIn {
    /// From `CONSOLE_AUTH_URL`, `CONSOLE_CLIENT_ID`, `CONSOLE_REDIRECT_URI`, `CONSOLE_SCOPE`.
    pub fn from_env() -> Option<Self> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// From any variable lookup; `None` unless the URL (http or https, no query) and the
    /// client id are set.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |k: &str| {
            var(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let (auth_url, client_id) = match (set("CONSOLE_AUTH_URL"), set("CONSOLE_CLIENT_ID")) {
            (Some(url), Some(id)) => (url.trim_end_matches('/').to_owned(), id),
            (None, None) => return None,
            // One without the other is a setting half made, not a choice: said.
            (url, _) => {
                let missing = if url.is_some() {
                    "CONSOLE_CLIENT_ID"
                } else {
                    "CONSOLE_AUTH_URL"
                };
                tracing::warn!(
                    missing,
                    "hosted sign-in needs both CONSOLE_AUTH_URL and CONSOLE_CLIENT_ID: the console offers none"
                );
                return None;
            }
        };
        let origin_ok = (auth_url.starts_with("https://") || auth_url.starts_with("http://"))
            && auth_url
                .chars()
                .all(|c| c.is_ascii_graphic() && !"?#'\";,\\".contains(c));
        if !origin_ok {
            tracing::warn!(
                "CONSOLE_AUTH_URL is not an http(s) URL: the console offers no hosted sign-in"
            );
            return None;
        }
        Some(Self {
            auth_url,
            client_id,
            redirect_uri: set("CONSOLE_REDIRECT_URI"),
            scope: set("CONSOLE_SCOPE").unwrap_or_else(|| "openid pricing/api".to_owned()),
        })
    }

    /// The origin (scheme, host, port) of the authorization server: the console's
    /// Content-Security-Policy lets it post the code exchange there.
    pub fn origin(&self) -> &str {
        let rest = self.auth_url.split_once("://").map_or("", |(_, r)| r);
        let host_len = rest.find('/').unwrap_or(rest.len());
        &self.auth_url[..self.auth_url.len() - rest.len() + host_len]
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "hostedSignIn": {
                "authorizeUrl": format!("{}/oauth2/authorize", self.auth_url),
                "tokenUrl": format!("{}/oauth2/token", self.auth_url),
                "logoutUrl": format!("{}/logout", self.auth_url),
                "clientId": self.client_id,
                "redirectUri": self.redirect_uri,
                "scope": self.scope,
            }
        })
    }
}

/// The console's routes; merged into the API router (no state, no authentication). The
/// hosted sign-in is read from the environment once.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    with_sign_in(HostedSignIn::from_env())
}

/// The console's routes with the given hosted sign-in (or none).
pub fn with_sign_in<S: Clone + Send + Sync + 'static>(sign_in: Option<HostedSignIn>) -> Router<S> {
    let policy = sign_in
        .as_ref()
        .and_then(|s| {
            let p = CONTENT_SECURITY_POLICY.replace(
                "connect-src 'self'",
                &format!("connect-src 'self' {}", s.origin()),
            );
            HeaderValue::from_str(&p).ok()
        })
        .unwrap_or(HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    let config = match &sign_in {
        None => serde_json::json!({ "hostedSignIn": null }),
        Some(s) => s.json(),
    };
    let config = axum::body::Bytes::from(config.to_string());
    let (p1, p2, p3, p4) = (policy.clone(), policy.clone(), policy.clone(), policy);
    Router::new()
        .route(
            "/console/config.json",
            get(move || async move { respond("application/json", config.clone(), p1.clone()) }),
        )
        // Relative asset URLs resolve under `/console/`, whatever prefix the API has.
        .route(
            "/console",
            get(move || async move {
                secure(Redirect::permanent("console/").into_response(), p4.clone())
            }),
        )
        .route(
            "/console/",
            get(move |headers: HeaderMap| async move { serve("index.html", p2.clone(), &headers) }),
        )
        .route(
            "/console/{*path}",
            get(
                move |Path(path): Path<String>, headers: HeaderMap| async move {
                    serve(&path, p3.clone(), &headers)
                },
            ),
        )
}

fn serve(path: &str, policy: HeaderValue, headers: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.path == path) else {
        return secure(
            crate::error::ApiError::not_found(format!("the console has no file {path}"))
                .into_response(),
            policy,
        );
    };
    secure(
        crate::gzip::respond(asset.gz, asset.content_type, headers),
        policy,
    )
}

fn respond(content_type: &'static str, body: axum::body::Bytes, policy: HeaderValue) -> Response {
    secure(
        ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        policy,
    )
}

/// The console's security headers on `response`.
fn secure(mut response: Response, policy: HeaderValue) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        // Small files, embedded: revalidating costs little and a new binary shows at once.
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    async fn get(path: &str) -> Response {
        let router: Router = with_sign_in(None);
        router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn serves_every_asset_with_its_type_and_policy_compressed_or_not() {
        for asset in ASSETS {
            let source = std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("console")
                    .join(asset.path),
            )
            .unwrap();
            assert!(!source.is_empty(), "{}", asset.path);
            // Without Accept-Encoding: the file as it is in the repository.
            let r = get(&format!("/console/{}", asset.path)).await;
            assert_eq!(r.status(), StatusCode::OK, "{}", asset.path);
            assert_eq!(r.headers()[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(
                r.headers()[header::CONTENT_SECURITY_POLICY],
                CONTENT_SECURITY_POLICY
            );
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
            let plain = axum::body::to_bytes(r.into_body(), 1 << 22).await.unwrap();
            assert_eq!(plain, source, "{}", asset.path);
            // A browser's request: gzip, which inflates to the same file.
            let router: Router = with_sign_in(None);
            let r = router
                .oneshot(
                    Request::get(format!("/console/{}", asset.path))
                        .header(header::ACCEPT_ENCODING, "gzip, deflate, br")
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let gz = axum::body::to_bytes(r.into_body(), 1 << 22).await.unwrap();
            assert!(
                gz.len() < source.len() || source.len() < 200,
                "{}",
                asset.path
            );
            assert_eq!(crate::gzip::inflate(&gz), source, "{}", asset.path);
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    async fn body(r: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn config_without_hosted_sign_in() {
        assert_eq!(HostedSignIn::from_vars(vars(&[])), None);
        // Both the URL and the client id are needed; a URL must be http(s), one origin.
        assert_eq!(
            HostedSignIn::from_vars(vars(&[("CONSOLE_CLIENT_ID", "c")])),
            None
        );
        for bad in [
            "ftp://x",
            "https://x/?a",
            "https://x y",
            "https://x;'unsafe-inline'",
        ] {
            let v = vars(&[("CONSOLE_AUTH_URL", bad), ("CONSOLE_CLIENT_ID", "c")]);
            assert_eq!(HostedSignIn::from_vars(v), None, "{bad}");
        }
        let router: Router = with_sign_in(None);
        let r = router
            .oneshot(
                Request::get("/console/config.json")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(body(r).await, serde_json::json!({ "hostedSignIn": null }));
    }

    #[tokio::test]
    async fn config_with_hosted_sign_in_and_its_origin_in_the_policy() {
        let s = HostedSignIn::from_vars(vars(&[
            (
                "CONSOLE_AUTH_URL",
                "https://pricing-1.auth.eu-west-1.amazoncognito.com/",
            ),
            ("CONSOLE_CLIENT_ID", "abc123"),
        ]))
        .unwrap();
        assert_eq!(
            s.origin(),
            "https://pricing-1.auth.eu-west-1.amazoncognito.com"
        );
        let local = HostedSignIn::from_vars(vars(&[
            ("CONSOLE_AUTH_URL", "http://127.0.0.1:9000/idp"),
            ("CONSOLE_CLIENT_ID", "c"),
            ("CONSOLE_REDIRECT_URI", "http://127.0.0.1:8080/console/"),
            ("CONSOLE_SCOPE", "openid"),
        ]))
        .unwrap();
        assert_eq!(local.origin(), "http://127.0.0.1:9000");
        assert_eq!(
            local.redirect_uri.as_deref(),
            Some("http://127.0.0.1:8080/console/")
        );
        let router: Router = with_sign_in(Some(s));
        for path in ["/console/config.json", "/console/", "/console/app.js"] {
            let r = router
                .clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap();
            assert!(
                csp.contains(
                    "connect-src 'self' https://pricing-1.auth.eu-west-1.amazoncognito.com;"
                ),
                "{csp}"
            );
            if path.ends_with("config.json") {
                assert_eq!(
                    body(r).await,
                    serde_json::json!({ "hostedSignIn": {
                        "authorizeUrl": "https://pricing-1.auth.eu-west-1.amazoncognito.com/oauth2/authorize",
                        "tokenUrl": "https://pricing-1.auth.eu-west-1.amazoncognito.com/oauth2/token",
                        "logoutUrl": "https://pricing-1.auth.eu-west-1.amazoncognito.com/logout",
                        "clientId": "abc123",
                        "redirectUri": null,
                        "scope": "openid pricing/api",
                    }})
                );
            }
        }
    }

    #[tokio::test]
    async fn index_redirect_and_unknown_files() {
        let r = get("/console").await;
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(r.headers()[header::LOCATION], "console/");
        // Every answer of the console's routes has its security headers (an outside probe
        // found them on the 200s only).
        assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let r = get("/console/").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        for missing in [
            "/console/nope.js",
            "/console/../Cargo.toml",
            "/console/pages/",
        ] {
            let r = get(missing).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{missing}");
            assert_eq!(
                r.headers()[header::CONTENT_TYPE],
                "application/problem+json",
                "{missing}"
            );
            assert_eq!(
                r.headers()[header::CONTENT_SECURITY_POLICY],
                CONTENT_SECURITY_POLICY,
                "{missing}"
            );
        }
    }
}
