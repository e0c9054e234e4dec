//! /docs, the interactive API reference, with the security headers the
//! dashboard has: it must not be framed (clickjacking of "Try it out" with a
//! pasted credential), and it runs only the scripts it ships. poem-openapi
//! renders the page with two inline scripts (the Swagger UI bundle and the
//! document with its start-up call) and an inline stylesheet, so the policy
//! allows exactly those scripts by their SHA-256, computed once from the
//! page itself, instead of `'unsafe-inline'`.
//!
//! The page shows the document as served at /openapi.json (OpenAPI 3.1,
//! with what `document` adds: the layers' answers, the rules, the request
//! examples), not the one poem-openapi generates ([`reference`]).

use base64::Engine;
use poem::http::header;
use poem::{Endpoint, IntoResponse, Request, Response};
use sha2::{Digest, Sha256};

/// The Swagger UI endpoint, its page holding the served document in place
/// of the generated one (poem-openapi writes the document into the page
/// as is, so the one text is swapped for the other).
pub fn reference<T: poem_openapi::OpenApi>(service: &poem_openapi::OpenApiService<T, ()>) -> impl Endpoint {
    let page = served_page(&service.swagger_ui_html(), &service.spec(), &crate::openapi_json());
    poem::Route::new()
        .at("/", poem::endpoint::make_sync(move |_| poem::web::Html(page.clone())))
        .at("/oauth-receiver.html", service.swagger_ui())
}

/// `page` with the `generated` document replaced by the `served` one; the
/// page as it is when it does not hold `generated` (the test catches it).
fn served_page(page: &str, generated: &str, served: &str) -> String {
    match page.find(generated) {
        Some(at) => format!("{}{}{}", &page[..at], served, &page[at + generated.len()..]),
        None => page.to_string(),
    }
}

/// Wraps the Swagger UI endpoint with the headers.
pub async fn secure<E: Endpoint>(next: E, req: Request) -> poem::Result<Response> {
    let resp = next.call(req).await?.into_response();
    let is_html = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    let (mut parts, body) = resp.into_parts();
    let body = if is_html {
        let bytes = body.into_bytes().await?;
        let csp = policy_for(&bytes);
        parts.headers.insert(header::CONTENT_SECURITY_POLICY, csp.parse().expect("a policy is a valid header value"));
        poem::Body::from(bytes)
    } else {
        body
    };
    parts.headers.insert(header::X_FRAME_OPTIONS, "DENY".parse().expect("valid"));
    parts.headers.insert(header::X_CONTENT_TYPE_OPTIONS, "nosniff".parse().expect("valid"));
    parts.headers.insert(header::REFERRER_POLICY, "no-referrer".parse().expect("valid"));
    Ok(Response::from_parts(parts, body))
}

/// The policy of a page: its inline scripts allowed by hash (two pages,
/// the reference and its OAuth receiver, each hashed as served; /docs is not
/// a hot path).
fn policy_for(page: &[u8]) -> String {
    let text = String::from_utf8_lossy(page);
    let hashes: Vec<String> = inline_scripts(&text)
        .into_iter()
        .map(|s| format!("'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s))))
        .collect();
    format!(
        "default-src 'none'; script-src {}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        hashes.join(" ")
    )
}

/// The text of every inline `<script>` element (those without `src`).
fn inline_scripts(page: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(open) = rest.find("<script") {
        let Some(close_tag) = rest[open..].find('>') else { break };
        let tag = &rest[open..open + close_tag];
        let body_start = open + close_tag + 1;
        let Some(end) = rest[body_start..].find("</script>") else { break };
        if !tag.contains("src=") {
            out.push(&rest[body_start..body_start + end]);
        }
        rest = &rest[body_start + end + "</script>".len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_the_served_document() {
        let page = served_page(&crate::api_service().swagger_ui_html(), &crate::api_service().spec(), "{}");
        assert!(page.contains("let spec = {};"), "the generated document was not found in the page");
        assert!(!page.contains("\"openapi\": \"3.0"));
    }

    #[test]
    fn every_inline_script_is_found_and_external_ones_are_not() {
        let page = r#"<head><script charset="UTF-8">one()</script><script src="/x.js"></script></head>
            <body><script>
            two()
            </script></body>"#;
        assert_eq!(inline_scripts(page), ["one()", "\n            two()\n            "]);
    }
}
