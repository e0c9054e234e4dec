//! Found by a penetration test: one tenant froze analytics for all by
//! reporting `cost_microusd: i64::MAX` twice (the rollup's sum left bigint
//! and failed every pass). Amounts are bounded at intake, and every sum of
//! them saturates instead of failing, so no row can stop a background pass.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use switchyard_shared::domain::run_record::MAX_AMOUNT;
use switchyard_shared::store::analytics;

use crate::harness::{assert_problem, TestEnv};
use crate::support::sdk::{accepted_async_run, sdk_post};

#[tokio::test]
async fn usage_amounts_are_bounded_and_sums_saturate_instead_of_failing() {
    let env = TestEnv::start().await;
    let a = accepted_async_run(&env, json!({}), json!({})).await;
    let (rid, tok) = (a.run_id.as_str(), a.token.as_str());
    for field in ["cost_microusd", "tokens_in", "tokens_out", "cpu_ms"] {
        let got = sdk_post(&env, rid, "usage", tok, json!({ field: i64::MAX })).await;
        let p = assert_problem(422, got, 422);
        assert_eq!(p["errors"][0]["location"], format!("body.{field}"), "{p}");
    }
    let (s, v) = sdk_post(&env, rid, "usage", tok, json!({"cost_microusd": MAX_AMOUNT})).await;
    assert_eq!(s, 201, "the bound itself is accepted: {v}");

    // Rows written before the bound (or by any other path) cannot stop the
    // rollup: they saturate.
    for _ in 0..2 {
        sqlx::query(
            "INSERT INTO job_run_usage (id, run_id, attempt, cost_microusd, tokens_in, tokens_out, cpu_ms)
             VALUES ($1, $2, 1, $3, $3, $3, $3)",
        )
        .bind(format!("use_{}", uuid::Uuid::now_v7().simple()))
        .bind(rid)
        .bind(i64::MAX)
        .execute(&env.pool)
        .await
        .unwrap();
    }
    let (s, live) = env.get(&format!("/v1/runs/{rid}/usage")).await;
    assert_eq!(s, 200, "{live}");
    let (s, before) = env.get("/v1/usage/projects").await;
    assert_eq!(s, 200, "the unrolled sum saturates: {before}");
    while !analytics::roll_up(&env.pool, Utc::now(), Duration::ZERO, Duration::from_secs(6 * 3600))
        .await
        .expect("the rollup passes over the extreme rows")
        .caught_up
    {}
    let (s, after) = env.get("/v1/usage/projects").await;
    assert_eq!(s, 200, "{after}");
    assert_eq!(after["projects"][0]["cost_microusd"], i64::MAX, "{after}");
}
