-- Signing keys at rest (security finding: webhook, subscription and
-- log-drain secrets in the clear, and a job's webhook_secret copied into
-- every job version).
--
-- A job's webhook_secret (jobs.spec->>'webhook_secret'), a subscription's
-- secret (webhook_subscriptions.secret) and a log drain's secret
-- (log_drains.secret) are now written sealed with SECRETS_KEY, as job
-- secrets are: 'sealed:v1:<nonce hex>:<ciphertext hex>' in the column they
-- always had (shared/src/secrets.rs). The senders (worker dispatch,
-- delivery sender, drain sender) open them just before they sign.
--
-- SQL cannot seal (it has no SECRETS_KEY), so existing values stay as they
-- are and keep working: a value without the prefix is used as written, with
-- or without SECRETS_KEY. Each is sealed the next time it is written through
-- the API (setting the secret again); nothing rewrites them behind the
-- operator's back, because a server without SECRETS_KEY must keep signing
-- with them.
--
-- What this migration can do without the key it does: versions no longer
-- hold the secret at all. Each version row that has one keeps only the flag
-- has_webhook_secret (the API's has_webhook_secret of that version); the
-- dispatch and the deliveries read the key from the job's row, so a run
-- pinned to an old version is signed with the job's current key.
UPDATE job_versions
   SET spec = (spec - 'webhook_secret') || jsonb_build_object('has_webhook_secret', true)
 WHERE spec ? 'webhook_secret';
