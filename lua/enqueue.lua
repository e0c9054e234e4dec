-- enqueue: put runs' entries into `ready` (due now) or `scheduled` (due later).
-- Idempotent: an entry already present anywhere is left alone, so the
-- reconciler may re-enqueue from Postgres as often as it likes. Takes many
-- entries per call so that the api's group-committed triggers cost one
-- script call per batch.
--
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] throttled   KEYS[4] leases
-- KEYS[5] parked  KEYS[6] signal
-- ARGV[1] now_ms, then per entry three values: entry, rank (ready score),
-- due_ms (0 = now)
-- Returns {how many entries were enqueued (the rest were already present),
-- how many of them went to `ready`}.
local now = tonumber(ARGV[1])

local function present(entry)
  for i = 1, 4 do
    if redis.call('ZSCORE', KEYS[i], entry) then return true end
  end
  local _, job, rankhex, ckey = string.match(entry, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
  if redis.call('ZSCORE', KEYS[5], 'J|' .. job .. '|' .. rankhex .. '|' .. entry) then return true end
  return ckey ~= '' and redis.call('ZSCORE', KEYS[5],
    'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. entry) ~= false
end

local added, ready = 0, 0
for i = 2, #ARGV, 3 do
  local entry, rank, due = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if not present(entry) then
    if due > now then
      redis.call('ZADD', KEYS[2], due, entry)
    else
      redis.call('ZADD', KEYS[1], rank, entry)
      ready = ready + 1
    end
    added = added + 1
  end
end
-- A wake-up per ready entry, as a one-entry call would leave, up to the
-- list's cap of 8 (a woken worker dequeues a whole batch).
local wake = math.min(ready, 8 - redis.call('LLEN', KEYS[6]))
for _ = 1, wake do redis.call('RPUSH', KEYS[6], '1') end
return { added, ready }
