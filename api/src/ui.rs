//! The web dashboard at /ui: a static page, one ES module, a stylesheet and
//! an icon, embedded in the binary and served as plain routes outside the
//! OpenAPI service (they are not part of the API document). The page talks to the
//! public API only, with the token the user pastes into its login form.
//!
//! Every answer carries a strict Content-Security-Policy (same origin only,
//! no inline script or style), `X-Content-Type-Options: nosniff`, and
//! `Cache-Control: no-cache` with an ETag, so a browser revalidates (304)
//! and never runs a dashboard older than the binary serving it.

use poem::http::{header, StatusCode};
use poem::{handler, Request, Response, Route};
use sha2::{Digest, Sha256};

/// The policy of every /ui answer: nothing but this origin, and no inline
/// script or style (the page sets styles through the CSSOM only).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const ASSETS: [Asset; 4] = [
    Asset { name: "index.html", content_type: "text/html; charset=utf-8", body: include_bytes!("../ui/index.html") },
    Asset { name: "app.js", content_type: "text/javascript; charset=utf-8", body: include_bytes!("../ui/app.js") },
    Asset { name: "app.css", content_type: "text/css; charset=utf-8", body: include_bytes!("../ui/app.css") },
    // An image, which the policy's img-src 'self' allows (no script in it).
    Asset { name: "favicon.svg", content_type: "image/svg+xml", body: include_bytes!("../ui/favicon.svg") },
];

fn etag(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

fn serve(req: &Request, name: &str) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY)
            .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
            .content_type("text/plain; charset=utf-8")
            .body("not found");
    };
    let tag = etag(asset.body);
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let builder = Response::builder()
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::ETAG, tag)
        .header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer")
        .header(header::X_FRAME_OPTIONS, "DENY");
    if fresh {
        return builder.status(StatusCode::NOT_MODIFIED).finish();
    }
    builder.content_type(asset.content_type).body(asset.body)
}

#[handler]
fn index(req: &Request) -> Response {
    serve(req, "index.html")
}

#[handler]
fn ui_file(req: &Request, poem::web::Path(path): poem::web::Path<String>) -> Response {
    // Any other path under /ui is the page itself (hash routing lives in the
    // fragment, but a reload of /ui/ or a deep link still gets the page).
    if ASSETS.iter().any(|a| a.name == path && a.name != "index.html") {
        serve(req, &path)
    } else if path.contains('.') {
        serve(req, "")
    } else {
        serve(req, "index.html")
    }
}

/// The dashboard's icon at /favicon.ico, where a browser asks for it on
/// every other page (/docs, /openapi.json).
#[poem::handler]
pub fn favicon(req: &Request) -> Response {
    serve(req, "favicon.svg")
}

/// The dashboard's routes, to nest at /ui.
pub fn routes() -> Route {
    Route::new().at("/", poem::get(index)).at("/*path", poem::get(ui_file))
}

#[cfg(test)]
mod tests {
    use poem::test::TestClient;

    use super::*;

    #[tokio::test]
    async fn assets_have_their_types_a_strict_policy_and_revalidate() {
        let cli = TestClient::new(Route::new().nest("/ui", routes()).at("/favicon.ico", poem::get(favicon)));
        for (path, ty) in [
            ("/favicon.ico", "image/svg+xml"),
            ("/ui", "text/html; charset=utf-8"),
            ("/ui/", "text/html; charset=utf-8"),
            ("/ui/projects", "text/html; charset=utf-8"),
            ("/ui/app.js", "text/javascript; charset=utf-8"),
            ("/ui/app.css", "text/css; charset=utf-8"),
            ("/ui/favicon.svg", "image/svg+xml"),
        ] {
            let resp = cli.get(path).send().await;
            resp.assert_status_is_ok();
            resp.assert_header("content-type", ty);
            resp.assert_header("cache-control", "no-cache");
            resp.assert_header("content-security-policy", CONTENT_SECURITY_POLICY);
            resp.assert_header("x-content-type-options", "nosniff");
            let tag = resp.0.headers().get("etag").unwrap().to_str().unwrap().to_string();
            let again = cli.get(path).header("if-none-match", &tag).send().await;
            again.assert_status(StatusCode::NOT_MODIFIED);
        }
        cli.get("/ui/missing.js").send().await.assert_status(StatusCode::NOT_FOUND);
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"), "no inline script or style");
    }

    #[test]
    fn the_dashboard_is_not_in_the_api_document() {
        let doc = crate::openapi_json();
        assert!(!doc.contains("\"/ui"), "the /ui routes stay outside the OpenAPI service");
    }

    /// The page sets data as text: the module never assigns HTML.
    #[test]
    fn the_module_never_writes_html() {
        let js = std::str::from_utf8(ASSETS[1].body).unwrap();
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
            assert!(!js.contains(sink), "app.js uses {sink}");
        }
    }
}
