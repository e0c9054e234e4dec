-- Each project's signing secret: the key of the notifications that have no
-- secret of their own (a step's stage notifications to URLs, a
-- wait_for_event step's event-trigger notification, the terminal webhook
-- of a job without a webhook_secret). Random per project, so one
-- project's receivers cannot forge another project's notifications, and
-- kept apart from the server's keys, so rotating JWT_SIGNING_KEY or
-- SECRETS_KEY never breaks a receiver. Stored as the other signing keys
-- are (a job's webhook_secret, a subscription's secret): the sender needs
-- it as it is. gen_random_uuid draws from the strong random source; two
-- give 244 random bits. A volatile default is computed per row, so every
-- existing project gets its own.
ALTER TABLE projects ADD COLUMN signing_secret text NOT NULL
    DEFAULT ('pss_' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
