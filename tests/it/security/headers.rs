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
