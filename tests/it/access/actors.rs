//! Actor identity (docs/contract.md, "Access control"): created_by / updated_by
//! from every credential kind, actor headers trusted only with the internal
//! secret, and profiles synchronised off the request path.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::oidc::{member, oidc_env, user_token};
use super::{call_as, eventually, key, TARGET};
use crate::harness::SECRET;

#[tokio::test]
async fn every_credential_kind_is_recorded_as_the_actor() {
    let env = oidc_env().await;
    let project = env.project().await;
    let new_job = json!({"project_id": project, "name": "j", "endpoint_url": TARGET});
    let actor_headers =
        [("x-actor-id", "grace"), ("x-actor-email", "grace@example.test"), ("x-actor-name", "Grace Hopper")];

    // Internal secret with actor headers: a user.
    let (s, job) =
        call_as(&env, &env.base, Some(SECRET), &actor_headers, Method::POST, "/v1/jobs", Some(new_job.clone())).await;
    assert_eq!(s, 201, "{job}");
    assert_eq!((job["created_by"].as_str(), job["updated_by"].as_str()), (Some("grace"), Some("grace")));
    let job_id = job["id"].as_str().unwrap().to_string();

    // An API key: apikey:<id>, whatever X-Actor-Id says.
    let (raw, key_id) = key(&env, &project, &[]).await;
    let (s, updated) = call_as(
        &env,
        &env.base,
        Some(&raw),
        &actor_headers,
        Method::PATCH,
        &format!("/v1/jobs/{job_id}"),
        Some(json!({"description": "d"})),
    )
    .await;
    assert_eq!(s, 200, "{updated}");
    assert_eq!(updated["created_by"], "grace");
    assert_eq!(updated["updated_by"], format!("apikey:{key_id}"));
    let (s, run) = call_as(
        &env,
        &env.base,
        Some(&raw),
        &actor_headers,
        Method::POST,
        &format!("/v1/jobs/{job_id}/trigger"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201);
    assert_eq!(run["created_by"], format!("apikey:{key_id}"));

    // OIDC: the token's subject.
    member(&env, &project, "linus", "operator").await;
    let token = user_token("linus", Some(&project));
    let (s, run) = call_as(
        &env,
        &env.base,
        Some(&token),
        &actor_headers,
        Method::POST,
        &format!("/v1/jobs/{job_id}/trigger"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201, "{run}");
    assert_eq!(run["created_by"], "linus");

    // The bare internal secret names nobody.
    let (_, run) = env.post(&format!("/v1/jobs/{job_id}/trigger"), json!({})).await;
    assert!(run.get("created_by").is_none(), "{run}");

    // The profile from the headers lands in known_actors.
    let row: (Option<String>, Option<String>) = eventually(Duration::from_secs(5), || async {
        sqlx::query_as("SELECT email, name FROM known_actors WHERE id = 'grace'")
            .fetch_optional(&env.pool)
            .await
            .unwrap()
    })
    .await;
    assert_eq!(row, (Some("grace@example.test".into()), Some("Grace Hopper".into())));
    // Key requests never create profiles from headers they are not trusted with.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM known_actors WHERE id LIKE 'apikey:%'")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    let versions: Vec<Value> =
        sqlx::query_scalar("SELECT to_jsonb(created_by) FROM job_versions WHERE job_id = $1 ORDER BY version")
            .bind(&job_id)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(versions, vec![json!("grace"), json!(format!("apikey:{key_id}"))]);
}
