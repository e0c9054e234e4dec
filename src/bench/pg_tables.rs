//! Where Postgres spends its work: per table of the bench database, the
//! scans and row writes of the whole benchmark, per accepted run. Read last,
//! after the idle phase, when every backend has flushed its statistics (a
//! backend may hold them back for up to 10 s). A sequential scan per run or
//! more updates than the run's transitions stand out here.

use serde::Serialize;

use super::system::System;

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct TableActivity {
    pub table: String,
    pub seq_scan: i64,
    pub seq_tup_read: i64,
    pub idx_scan: i64,
    pub n_tup_ins: i64,
    pub n_tup_upd: i64,
    pub n_tup_hot_upd: i64,
    pub n_tup_del: i64,
}

#[derive(Debug, Serialize)]
pub struct PerRun {
    pub table: String,
    pub seq_scans: f64,
    pub seq_rows_read: f64,
    pub index_scans: f64,
    pub inserts: f64,
    pub updates: f64,
    /// Share of updates that were HOT (no index entries written).
    pub hot_pct: f64,
    pub deletes: f64,
}

pub async fn per_run(sys: &System, runs: usize) -> anyhow::Result<Vec<PerRun>> {
    let rows: Vec<TableActivity> = sqlx::query_as(
        // A partitioned table's partitions count as the table.
        "SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS table,
                sum(coalesce(seq_scan, 0))::int8 AS seq_scan, sum(coalesce(seq_tup_read, 0))::int8 AS seq_tup_read,
                sum(coalesce(idx_scan, 0))::int8 AS idx_scan, sum(n_tup_ins)::int8 AS n_tup_ins,
                sum(n_tup_upd)::int8 AS n_tup_upd, sum(n_tup_hot_upd)::int8 AS n_tup_hot_upd,
                sum(n_tup_del)::int8 AS n_tup_del
         FROM pg_stat_user_tables
         WHERE seq_scan + coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del > 0
         GROUP BY 1
         ORDER BY sum(n_tup_ins + n_tup_upd + coalesce(idx_scan, 0)) DESC",
    )
    .fetch_all(sys.pool())
    .await?;
    let n = runs.max(1) as f64;
    let r2 = |x: i64| (x as f64 / n * 100.0).round() / 100.0;
    Ok(rows
        .into_iter()
        // Tables touched only while setting up round to nothing per run.
        .filter(|t| (t.seq_scan + t.idx_scan + t.n_tup_ins + t.n_tup_upd + t.n_tup_del) as f64 / n >= 0.01)
        .map(|t| PerRun {
            seq_scans: r2(t.seq_scan),
            seq_rows_read: r2(t.seq_tup_read),
            index_scans: r2(t.idx_scan),
            inserts: r2(t.n_tup_ins),
            updates: r2(t.n_tup_upd),
            hot_pct: if t.n_tup_upd > 0 { (t.n_tup_hot_upd as f64 * 100.0 / t.n_tup_upd as f64).round() } else { 0.0 },
            deletes: r2(t.n_tup_del),
            table: t.table,
        })
        .collect())
}
