//! OIDC as the tests sign it: an api that accepts tokens of the test
//! issuer (keys in `tests/it/fixtures/oidc/`), tokens for a user, members.

use chrono::Utc;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::harness::TestEnv;

pub const ISSUER: &str = "https://id.example.test";
pub const AUDIENCE: &str = "switchyard-tests";

pub fn fixture(name: &str) -> String {
    format!("{}/tests/it/fixtures/oidc/{name}", env!("CARGO_MANIFEST_DIR"))
}

pub fn pem(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// An api that accepts OIDC tokens signed by the RSA test key.
pub async fn oidc_env() -> TestEnv {
    TestEnv::start_with(|c| {
        c.oidc_issuer = Some(ISSUER.into());
        c.oidc_audience = Some(AUDIENCE.into());
        c.oidc_public_key = Some(pem("rsa_public.pem"));
    })
    .await
}

/// A token for `sub` with extra claims, signed RS256 by `key_file`.
pub fn token_with(key_file: &str, alg: Algorithm, claims: Value) -> String {
    let now = Utc::now().timestamp();
    let mut c = json!({"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300});
    for (k, v) in claims.as_object().unwrap() {
        c[k] = v.clone();
    }
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem(key_file).as_bytes()).unwrap(),
        _ => EncodingKey::from_rsa_pem(pem(key_file).as_bytes()).unwrap(),
    };
    jsonwebtoken::encode(&Header::new(alg), &c, &key).unwrap()
}

pub fn user_token(sub: &str, project: Option<&str>) -> String {
    let mut claims = json!({"sub": sub, "email": format!("{sub}@example.test"), "name": "Ada Lovelace"});
    if let Some(p) = project {
        claims["project_id"] = json!(p);
    }
    token_with("rsa_private.pem", Algorithm::RS256, claims)
}

pub async fn member(env: &TestEnv, project: &str, user: &str, role: &str) {
    let (s, v) = env.post("/v1/members", json!({"project_id": project, "user_id": user, "role_id": role})).await;
    assert!(s == 201 || s == 200, "{v}");
}
