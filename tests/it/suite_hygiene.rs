//! What the suite leaves on a shared server: a test's database is removed
//! when its setup fails, and the databases of a killed run are dropped by
//! the next one (`switchyard_shared::testing`).

use sqlx::{Connection, PgConnection};
use switchyard_shared::testing::{self, pg_base, RemoveOnDrop, Scratch};

async fn admin() -> PgConnection {
    PgConnection::connect(&format!("{}/postgres", pg_base())).await.expect("admin connection")
}

async fn exists(name: &str) -> bool {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut admin().await)
        .await
        .unwrap();
    n == 1
}

#[tokio::test]
async fn a_failed_setup_removes_its_database() {
    let scratch = Scratch::named("sy_it", "syt");
    let made = {
        let setup = RemoveOnDrop::new(&scratch);
        scratch.prepare().await;
        let made = exists(&scratch.db_name).await;
        // The setup fails here: the guard is dropped armed.
        drop(setup);
        made
    };
    assert!(made);
    assert!(!exists(&scratch.db_name).await, "{} is left", scratch.db_name);
}

#[tokio::test]
async fn a_killed_runs_databases_are_dropped_by_the_next() {
    // A name whose UUIDv7 says 1970: far older than any run in progress.
    let old = format!("sy_it_000000000001{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    sqlx::query(&format!("CREATE DATABASE \"{old}\"")).execute(&mut admin().await).await.unwrap();
    let fresh = Scratch::create("sy_it", "syt").await;
    testing::drop_leftovers().await;
    assert!(!exists(&old).await, "{old} is left");
    assert!(exists(&fresh.db_name).await, "a database of a run in progress stays");
    fresh.remove().await;
    assert!(!exists(&fresh.db_name).await);
}
