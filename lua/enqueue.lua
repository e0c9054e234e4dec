-- enqueue: put one run's entry into `ready` (due now) or `scheduled` (due later).
-- Idempotent: an entry already present anywhere is left alone, so the
-- reconciler may re-enqueue from Postgres as often as it likes.
--
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] throttled   KEYS[4] leases
-- KEYS[5] parked  KEYS[6] signal
-- ARGV[1] entry   ARGV[2] rank (ready score)   ARGV[3] due_ms (0 = now)
-- ARGV[4] now_ms
-- Returns 1 when enqueued, 0 when the entry was already present.
local entry = ARGV[1]
local rank = tonumber(ARGV[2])
local due = tonumber(ARGV[3])
local now = tonumber(ARGV[4])

for i = 1, 4 do
  if redis.call('ZSCORE', KEYS[i], entry) then return 0 end
end
local run, job, rankhex, ckey = string.match(entry, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
if redis.call('ZSCORE', KEYS[5], 'J|' .. job .. '|' .. rankhex .. '|' .. entry) then return 0 end
if ckey ~= '' and redis.call('ZSCORE', KEYS[5],
    'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. entry) then
  return 0
end

if due > now then
  redis.call('ZADD', KEYS[2], due, entry)
else
  redis.call('ZADD', KEYS[1], rank, entry)
  if redis.call('LLEN', KEYS[6]) < 8 then redis.call('RPUSH', KEYS[6], '1') end
end
return 1
