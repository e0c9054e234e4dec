//! /docs may not be framed and runs only the scripts it ships (hardening:
//! the dashboard already had these headers; the reference had none).

use crate::harness::TestEnv;

#[tokio::test]
async fn the_api_reference_has_a_content_security_policy_and_refuses_framing() {
    let env = TestEnv::start().await;
    let resp = reqwest::get(format!("{}/docs/", env.base)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers().clone();
    let page = resp.text().await.unwrap();
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("script-src 'unsafe-inline'") && !csp.contains("unsafe-eval"), "{csp}");
    // The page's two inline scripts (the bundle, and the document with the
    // start-up call) are allowed by their hashes, and nothing else.
    assert_eq!(csp.matches("'sha256-").count(), 2, "{csp}");
    assert!(page.contains("SwaggerUIBundle"), "the reference itself is served");
}

/// /docs renders the document as served at /openapi.json (3.1, with the
/// request examples), not the one poem-openapi generates, and its
/// OAuth receiver page is still there.
#[tokio::test]
async fn the_api_reference_shows_the_served_document() {
    let env = TestEnv::start().await;
    let page = reqwest::get(format!("{}/docs/", env.base)).await.unwrap().text().await.unwrap();
    let doc = reqwest::get(format!("{}/openapi.json", env.base)).await.unwrap().text().await.unwrap();
    // The served document, compact, its description folded by section.
    assert!(doc.contains(r#""openapi": "3.1.0""#) && doc.contains("send-welcome-email"));
    assert!(page.contains(r#""openapi":"3.1.0""#) && page.contains("send-welcome-email"), "not the served document");
    assert!(page.contains("<details><summary>Errors<\\/summary>"), "the description is not folded");
    let receiver = reqwest::get(format!("{}/docs/oauth-receiver.html", env.base)).await.unwrap();
    assert_eq!(receiver.status(), 200);
}

#[tokio::test]
async fn metrics_need_the_metrics_token_when_one_is_set() {
    use switchyard_shared::config::Secret;
    const TOKEN: &str = "metrics-token-0123456789";
    let env = TestEnv::start_with(|c| c.metrics_token = Some(Secret::new(TOKEN))).await;
    let client = reqwest::Client::new();
    let url = format!("{}/metrics", env.base);
    for bad in [None, Some("Bearer wrong-token-0123456789"), Some(TOKEN)] {
        let mut req = client.get(&url);
        if let Some(h) = bad {
            req = req.header("authorization", h);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{bad:?}");
        assert!(!resp.text().await.unwrap().contains("svc_"), "no series leak in the refusal");
    }
    let resp = client.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("# TYPE"));
    // Without a token configured, /metrics stays open for a private scraper.
    let open = TestEnv::start().await;
    assert_eq!(reqwest::get(format!("{}/metrics", open.base)).await.unwrap().status(), 200);
}
