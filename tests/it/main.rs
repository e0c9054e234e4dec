//! Integration tests: one binary, real Postgres and Redis. Each test makes
//! its own database and its own Redis key prefix, so all run in parallel.
//! Logs are off unless `TEST_LOG=1`.

mod harness;
mod support;
mod target;

mod access;
mod analytics;
mod api_contract;
mod api_groups;
mod api_jobs;
mod api_platform;
mod api_projects;
mod api_runs;
mod async_runs;
mod bulk_ops;
mod cli;
mod crate_boundaries;
mod events;
mod execution;
mod flow_batches;
mod flow_cancel_on;
mod flow_caps;
mod flow_cron;
mod flow_fairness;
mod flow_lifecycle;
mod flow_one_per_key;
mod flow_rate;
mod log_drains;
mod metrics_paths;
mod monitoring;
mod partitions;
mod plans;
mod recovery;
mod retention;
mod run_records;
mod secrets_envs;
mod security;
mod stats_queues;
mod store_tenancy;
mod streams;
mod suite_hygiene;
mod traces;
mod transitions;
mod waiting_steps;
mod wakeups;
mod webhooks;
mod workflow_plans;
mod workflow_runs;
mod workflows;
