//! /docs, the interactive API reference, with the security headers the
//! dashboard has: it must not be framed (clickjacking of "Try it out" with a
//! pasted credential), and it runs only the scripts it ships. poem-openapi
//! renders the page with two inline scripts (the Swagger UI bundle and the
//! document with its start-up call) and an inline stylesheet, so the policy
//! allows exactly those scripts by their SHA-256, computed once from the
//! page itself, instead of `'unsafe-inline'`.
//!
//! The page poem-openapi renders embeds its own OpenAPI 3.0 document; the
//! page served here embeds the one /openapi.json serves instead (3.1.0,
//! with its examples and rules), so what /docs shows is what clients get.
//! Its long description is folded there, section by section, so the
//! operations start a screen down rather than after pages of prose.

use base64::Engine;
use poem::http::header;
use poem::{Endpoint, IntoResponse, Request, Response};
use sha2::{Digest, Sha256};

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
        let bytes = with_served_document(&bytes);
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

/// The Swagger UI page with the served document in place of the one it
/// embeds (`let spec = {...};`). A page without that shape (the OAuth
/// receiver) is left as it is. Built once: the page is static.
fn with_served_document(page: &[u8]) -> Vec<u8> {
    static PAGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let text = String::from_utf8_lossy(page);
    const START: &str = "let spec = ";
    const END: &str = ";\n    let oauth2RedirectUrl";
    let (Some(start), Some(end)) = (text.find(START), text.find(END)) else { return page.to_vec() };
    PAGE.get_or_init(|| {
        let mut doc = crate::openapi_value().clone();
        if let Some(d) = doc["info"]["description"].as_str() {
            doc["info"]["description"] = fold(d).into();
        }
        // A `</script>` in a string would end the script early.
        let json = serde_json::to_string(&doc).unwrap_or_default().replace("</", "<\\/");
        format!("{}{json}{}", &text[..start + START.len()], &text[end..]).into_bytes()
    })
    .clone()
}

/// The description with its first paragraph open and each `**Section.**`
/// after it folded under its title (HTML `<details>`, which Swagger UI
/// renders).
fn fold(description: &str) -> String {
    let mut out = String::new();
    let mut open = false;
    for para in description.split("\n\n") {
        let title = para.strip_prefix("**").and_then(|p| p.split_once("**")).map(|(t, _)| t.trim_end_matches('.'));
        match title {
            Some(t) => {
                if open {
                    out.push_str("\n\n</details>\n\n");
                } else if !out.is_empty() {
                    out.push_str("\n\n");
                }
                out.push_str(&format!("<details><summary>{t}</summary>\n\n{para}"));
                open = true;
            }
            None if out.is_empty() => out.push_str(para),
            None => {
                out.push_str("\n\n");
                out.push_str(para);
            }
        }
    }
    if open {
        out.push_str("\n\n</details>");
    }
    out
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

    /// Markdown reads a line that starts with `403. ` or `- ` as a list
    /// item, which wrapped prose never means.
    #[test]
    fn no_line_of_a_description_reads_as_a_list_item() {
        fn walk(v: &serde_json::Value, at: &str, bad: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(o) => {
                    for (k, x) in o {
                        if let (true, Some(text)) = (k == "description", x.as_str()) {
                            for line in text.lines() {
                                let t = line.trim_start();
                                let numbered = t
                                    .split_once(". ")
                                    .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                                if numbered || t.starts_with("- ") || t.starts_with("* ") || t.starts_with("+ ") {
                                    bad.push(format!("{at}: {line}"));
                                }
                            }
                        }
                        walk(x, &format!("{at}/{k}"), bad);
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, at, bad)),
                _ => {}
            }
        }
        let mut bad = Vec::new();
        walk(crate::openapi_value(), "", &mut bad);
        assert!(bad.is_empty(), "{bad:#?}");
    }

    #[test]
    fn the_page_embeds_the_served_document() {
        let page = "<script>\n    let spec = {\"openapi\":\"3.0.0\"};\n    let oauth2RedirectUrl;\n</script>";
        let served = String::from_utf8(with_served_document(page.as_bytes())).unwrap();
        assert!(served.contains("\"openapi\":\"3.1.0\""), "{}", &served[..200]);
        // In the script, `</` is written `<\/` (the same JSON string).
        assert!(served.contains("<details><summary>Authentication<\\/summary>"));
        assert!(served.ends_with(";\n    let oauth2RedirectUrl;\n</script>"));
        assert_eq!(with_served_document(b"<html>receiver</html>"), b"<html>receiver</html>");
    }

    #[test]
    fn each_section_is_folded_under_its_title() {
        let d = "Intro.\n\n**Auth.** Send a key.\n\nMore on keys.\n\n**Errors** are JSON.\n\n**Paging.** Cursors.";
        assert_eq!(
            fold(d),
            "Intro.\n\n<details><summary>Auth</summary>\n\n**Auth.** Send a key.\n\nMore on keys.\n\n</details>\n\n\
             <details><summary>Errors</summary>\n\n**Errors** are JSON.\n\n</details>\n\n\
             <details><summary>Paging</summary>\n\n**Paging.** Cursors.\n\n</details>"
        );
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
