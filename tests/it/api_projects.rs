//! Projects and project settings.

use serde_json::json;

use crate::harness::{assert_problem, TestEnv, SECRET};

#[tokio::test]
async fn create_get_list_and_settings() {
    let env = TestEnv::start().await;
    let (s, p) = env.post("/v1/projects", json!({"id": "acme-prod", "name": "Acme"})).await;
    assert_eq!(s, 201, "{p}");
    assert_eq!(p["id"], "acme-prod");
    let (s, _) = env.post("/v1/projects", json!({"id": "acme-prod", "name": "Again"})).await;
    assert_eq!(s, 409, "duplicate id");
    let (s, g) = env.get("/v1/projects/acme-prod").await;
    assert_eq!((s, &g["name"]), (200, &json!("Acme")));

    let (s, st) = env.get("/v1/projects/acme-prod/settings").await;
    assert_eq!(s, 200);
    assert_eq!(st["project_id"], "acme-prod");
    assert_eq!(st["max_key_lifetime_days"], 365);
    let (s, st) =
        env.patch("/v1/projects/acme-prod/settings", json!({"plan_tier": "pro", "max_key_lifetime_days": 90})).await;
    assert_eq!(s, 200, "{st}");
    assert_eq!((st["plan_tier"].as_str(), st["max_key_lifetime_days"].as_i64()), (Some("pro"), Some(90)));
    let bad = env.patch("/v1/projects/acme-prod/settings", json!({"max_key_lifetime_days": 0})).await;
    let v = assert_problem(422, bad, 422);
    assert_eq!(v["errors"][0]["location"], "body.max_key_lifetime_days");
    let (_, st) = env.get("/v1/projects/acme-prod/settings").await;
    assert_eq!(st["max_key_lifetime_days"], 90, "a rejected change changes nothing");

    assert_problem(404, env.get("/v1/projects/nope/settings").await, 404);
    assert_problem(404, env.get("/v1/projects/bad%7Cid/settings").await, 404);
}

#[tokio::test]
async fn project_validation_and_paging() {
    let env = TestEnv::start().await;
    let v = assert_problem(422, env.post("/v1/projects", json!({"id": "a b", "name": ""})).await, 422);
    assert_eq!(v["errors"].as_array().unwrap().len(), 2, "{v}");
    for i in 0..5 {
        let (s, _) = env.post("/v1/projects", json!({"id": format!("p{i}"), "name": "x"})).await;
        assert_eq!(s, 201);
    }
    let (_, page1) = env.get("/v1/projects?limit=2").await;
    assert_eq!(page1["data"].as_array().unwrap().len(), 2);
    assert_eq!(page1["has_more"], true);
    let cursor = page1["next_cursor"].as_str().unwrap();
    let (_, page2) = env.get(&format!("/v1/projects?limit=2&cursor={cursor}")).await;
    assert_eq!(page2["data"][0]["id"], "p2");
    let (_, last) = env.get("/v1/projects?limit=100&cursor=p3").await;
    assert_eq!(last["data"].as_array().unwrap().len(), 1);
    assert_eq!(last["has_more"], false);
    assert!(last.get("next_cursor").is_none());
    assert_problem(422, env.get("/v1/projects?limit=101").await, 422);
    assert_problem(422, env.get("/v1/projects?limit=0").await, 422);
    let _ = SECRET;
}
