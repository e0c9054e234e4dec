//! The store's reads by id take the caller's tenant: a row of another
//! project is never returned, whatever the handler does with it.

use serde_json::{json, Value};
use switchyard_shared::store::{self, Tenant};

use crate::harness::TestEnv;

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap_or_else(|| panic!("no id in {v}")).to_string()
}

async fn created(env: &TestEnv, path: &str, body: Value) -> String {
    let (s, v) = env.post(path, body).await;
    assert_eq!(s, 201, "{path}: {v}");
    id(&v)
}

#[tokio::test]
async fn reads_by_id_return_only_the_tenants_rows() {
    let env = TestEnv::start().await;
    let a = env.project().await;
    let b = env.project().await;
    let group = created(&env, "/v1/job-groups", json!({"project_id": b, "name": "g", "slug": "g"})).await;
    let envm = created(&env, "/v1/environments", json!({"project_id": b, "name": "staging"})).await;
    let key = created(&env, "/v1/api-keys", json!({"project_id": b, "name": "k", "scopes": []})).await;
    let role = created(&env, "/v1/roles", json!({"project_id": b, "name": "r", "permissions": ["jobs:read"]})).await;
    let rp = created(
        &env,
        "/v1/resource-policies",
        json!({"project_id": b, "name": "p", "effect": "deny", "principal_type": "role", "principal_id": "viewer",
               "actions": ["jobs:read"], "resource_type": "job"}),
    )
    .await;
    let tp = created(&env, "/v1/tag-policies", json!({"project_id": b, "required_keys": ["team"]})).await;
    let pool = &env.pool;
    let (other, own, any) = (Tenant::Project(&a), Tenant::Project(&b), Tenant::Any);

    for t in [other, own, any] {
        let seen = t != other;
        assert_eq!(store::projects::get(pool, t, &b).await.unwrap().is_some(), seen, "project {t:?}");
        assert_eq!(
            store::job_groups::get(pool, t, &group.as_str().into()).await.unwrap().is_some(),
            seen,
            "group {t:?}"
        );
        assert_eq!(store::environments::get(pool, t, &envm).await.unwrap().is_some(), seen, "environment {t:?}");
        assert_eq!(store::api_keys::get(pool, t, &key).await.unwrap().is_some(), seen, "key {t:?}");
        assert_eq!(store::roles::get(pool, t, &role).await.unwrap().is_some(), seen, "role {t:?}");
        assert_eq!(store::policies::get_resource_policy(pool, t, &rp).await.unwrap().is_some(), seen, "rp {t:?}");
        assert_eq!(store::policies::get_tag_policy(pool, t, &tp).await.unwrap().is_some(), seen, "tp {t:?}");
        // System roles belong to no project: every tenant reads them.
        assert!(store::roles::get(pool, t, "viewer").await.unwrap().is_some(), "system role {t:?}");
    }
    assert!(!store::api_keys::exists_in_project(pool, &a, &key).await.unwrap());
    assert!(store::api_keys::exists_in_project(pool, &b, &key).await.unwrap());

    // A delete names the project too: another project's id deletes nothing.
    let gone = store::environments::delete_unused(pool, &a, &envm).await.unwrap();
    assert_eq!(gone, store::environments::Deleted::Missing);
    assert!(store::environments::get(pool, own, &envm).await.unwrap().is_some());
    assert_eq!(
        store::environments::delete_unused(pool, &b, &envm).await.unwrap(),
        store::environments::Deleted::Deleted
    );
}
