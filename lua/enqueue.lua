-- enqueue: put runs' entries into `ready` (due now) or `scheduled` (due later).
-- Idempotent: an entry already present anywhere is left alone, so the
-- reconciler may re-enqueue from Postgres as often as it likes. Takes many
-- entries per call so that the api's group-committed triggers cost one
-- script call per batch.
--
-- An entry of a job with `fairness: round_robin` made ready is ranked by
-- its tag (lib/fair.lua), not by its own rank.
--
-- KEYS[1] ready   KEYS[2] scheduled   KEYS[3] throttled   KEYS[4] leases
-- KEYS[5] parked  KEYS[6] signal  KEYS[7] limits  KEYS[8] fair
-- ARGV[1] now_ms, then per entry three values: entry, rank (ready score),
-- due_ms (0 = now)
-- Returns {how many entries were enqueued (the rest were already present),
-- how many of them went to `ready`}.
local now = tonumber(ARGV[1])
local fs = fair_open(KEYS[8], KEYS[7])

local function present(entry, job, rankhex, ckey)
  for i = 1, 4 do
    if redis.call('ZSCORE', KEYS[i], entry) then return true end
  end
  -- A tagged entry is waiting somewhere, parked at its tag if parked.
  if fair_job(fs, job).tagged and fair_tag_of(fs, entry) then return true end
  if redis.call('ZSCORE', KEYS[5], 'J|' .. job .. '|' .. rankhex .. '|' .. entry) then return true end
  return ckey ~= '' and redis.call('ZSCORE', KEYS[5],
    'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. entry) ~= false
end

local added, ready = 0, 0
for i = 2, #ARGV, 3 do
  local entry, rank, due = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local _, job, rankhex, ckey = string.match(entry, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
  if not present(entry, job, rankhex, ckey) then
    if due > now then
      redis.call('ZADD', KEYS[2], due, entry)
    else
      if fair_job(fs, job).fair then rank = fair_tag(fs, entry, job, ckey, rank) end
      redis.call('ZADD', KEYS[1], rank, entry)
      ready = ready + 1
    end
    added = added + 1
  end
end
fair_flush(fs)
-- A wake-up per ready entry, as a one-entry call would leave, up to the
-- list's cap of 8 (a woken worker dequeues a whole batch).
local wake = math.min(ready, 8 - redis.call('LLEN', KEYS[6]))
for _ = 1, wake do redis.call('RPUSH', KEYS[6], '1') end
return { added, ready }
