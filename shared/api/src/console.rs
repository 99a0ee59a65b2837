//! The web console (issue 14): static assets under `/console`, embedded in the binary.
//!
//! The console is a small front-end of plain ES modules (`shared/api/console/`) that calls
//! the public API with the user's token, so it can do nothing a client cannot. Its assets
//! need no token; the API calls carry one. Every asset is served with its content type, a
//! strict Content-Security-Policy (scripts, styles and connections to this origin only; no
//! inline script or style element, no frames, no form posts) and `nosniff`.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The policy of every console response. `connect-src 'self'`: the console talks to the
/// API it was served by and nowhere else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its path under `/console/`, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("../console/", $path)),
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
    asset!("vendor/uPlot.esm.js", JS),
    asset!("vendor/uPlot.min.css", CSS),
    asset!("vendor/uPlot.LICENSE", "text/plain; charset=utf-8"),
];

/// The console's routes; merged into the API router (no state, no authentication).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        // Relative asset URLs resolve under `/console/`, whatever prefix the API has.
        .route(
            "/console",
            get(|| async { Redirect::permanent("console/") }),
        )
        .route("/console/", get(|| async { serve("index.html") }))
        .route(
            "/console/{*path}",
            get(|Path(path): Path<String>| async move { serve(&path) }),
        )
}

fn serve(path: &str) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.path == path) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "not found",
        )
            .into_response();
    };
    let mut response = ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
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
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(path: &str) -> Response {
        let router: Router = routes();
        router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn serves_every_asset_with_its_type_and_policy() {
        for asset in ASSETS {
            let r = get(&format!("/console/{}", asset.path)).await;
            assert_eq!(r.status(), StatusCode::OK, "{}", asset.path);
            assert_eq!(r.headers()[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(
                r.headers()[header::CONTENT_SECURITY_POLICY],
                CONTENT_SECURITY_POLICY
            );
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert!(!asset.body.is_empty(), "{}", asset.path);
        }
    }

    #[tokio::test]
    async fn index_redirect_and_unknown_files() {
        let r = get("/console").await;
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(r.headers()[header::LOCATION], "console/");
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
            assert_eq!(
                get(missing).await.status(),
                StatusCode::NOT_FOUND,
                "{missing}"
            );
        }
    }
}
