-- extend_leases: push the expiry of leases this worker still holds. A lease
-- that is gone because it was reaped (in this Redis) is not recreated. A
-- lease that is gone because Redis lost its data (the entry was leased
-- under an earlier epoch than the current one) is taken again with its
-- concurrency slots, and its send is logged now in each rate-limit bucket
-- of its job (it went out at some moment before: logging it now counts it
-- for longer, never less): this worker still holds the dispatch, and
-- dequeue.lua keeps capped and rate-limited jobs' entries back until the
-- workers had time to say so.
--
-- The rebuild may have queued the entry again meanwhile (its run was still
-- `queued` in Postgres, the worker not having recorded `running` yet): it
-- is taken out of every waiting set, so it is not dispatched twice.
--
-- KEYS[1] leases  KEYS[2] active  KEYS[3] epoch  KEYS[4] limits  KEYS[5] rate
-- KEYS[6] ready  KEYS[7] scheduled  KEYS[8] throttled  KEYS[9] parked
-- KEYS[10] fair (a tagged entry is parked at its tag: lib/fair.lua)
-- ARGV[1] new expiry ms  ARGV[2] now ms, then per entry two values: the
-- entry and the id of the epoch it was leased (or last renewed) under
-- Returns {leases extended or taken again, the current epoch id ('' when
-- the epoch is missing: Redis is not rebuilt yet)}.
local cur = redis.call('GET', KEYS[3])
local cur_id = cur and string.match(cur, '^([^|]*)') or ''
local now = tonumber(ARGV[2])

-- rate_buckets: lib/buckets.lua.

local n = 0
local fs = fair_open(KEYS[10], KEYS[4])
for i = 3, #ARGV, 2 do
  local e, leased_under = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', KEYS[1], e) then
    redis.call('ZADD', KEYS[1], ARGV[1], e)
    n = n + 1
  elseif cur_id ~= '' and leased_under ~= cur_id then
    redis.call('ZADD', KEYS[1], ARGV[1], e)
    local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
    rankhex = fair_take(fs, e, job, rankhex)
    for k = 6, 8 do redis.call('ZREM', KEYS[k], e) end
    redis.call('ZREM', KEYS[9], 'J|' .. job .. '|' .. rankhex .. '|' .. e, 'U|' .. job .. '|' .. rankhex .. '|' .. e,
      'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. e)
    redis.call('HINCRBY', KEYS[2], 'j:' .. job, 1)
    if ckey ~= '' then redis.call('HINCRBY', KEYS[2], 'k:' .. job .. '|' .. ckey, 1) end
    for _, b in ipairs(rate_buckets(KEYS[4], job)) do
      redis.call('ZADD', KEYS[5], 0, b .. '|' .. string.format('%016x', now) .. '|' .. run)
    end
    n = n + 1
  end
end
fair_flush(fs)
return { n, cur_id }
