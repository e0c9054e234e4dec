-- promote: move the named entries of `scheduled` (retries, delayed runs whose
-- time has come) into `ready` at their own rank, and wake idle workers.
--
-- The caller names only entries whose runs it has already marked `queued` in
-- Postgres: a worker's claim requires that status, so an entry that reached
-- `ready` earlier would be dropped by the worker and its run left stranded.
-- Each entry moves only if it is still in `scheduled` and due (score <= now):
-- one that another scheduler moved already, or that was scheduled again for a
-- later time since the caller read it, stays where it is.
--
-- An entry of a job with `fairness: round_robin` is ranked by its tag
-- (lib/fair.lua): it arrives now.
--
-- KEYS[1] scheduled  KEYS[2] ready  KEYS[3] signal  KEYS[4] limits  KEYS[5] fair
-- ARGV[1] now_ms  ARGV[2..] entries to move
-- Returns {moved, ms until the first entry left in `scheduled` is due
-- (0 when one is due already) or -1 when `scheduled` is empty}.
local now = tonumber(ARGV[1])
local OFFSET = 9007199254740992
local moved = 0
local fs = fair_open(KEYS[5], KEYS[4])
for i = 2, #ARGV do
  local e = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], e)
  if score and tonumber(score) <= now then
    redis.call('ZREM', KEYS[1], e)
    local _, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
    local rank = tonumber(rankhex, 16) - OFFSET
    if fair_job(fs, job).fair then rank = fair_tag(fs, e, job, ckey, rank) end
    redis.call('ZADD', KEYS[2], rank, e)
    moved = moved + 1
  end
end
fair_flush(fs)
if moved > 0 and redis.call('LLEN', KEYS[3]) < 8 then redis.call('RPUSH', KEYS[3], '1') end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return { moved, wait }
