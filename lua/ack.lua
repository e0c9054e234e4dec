-- ack: end a dispatch after its outcome is committed in Postgres. Drops the
-- lease, frees the job's and the key's concurrency slots, brings back one
-- parked entry per freed slot, and, for a retry, schedules the entry again.
-- Called when the lease was already reaped (the worker was too slow) it frees
-- nothing twice, and still schedules a retry: the Postgres record is the truth.
--
-- KEYS[1] leases  KEYS[2] active  KEYS[3] parked  KEYS[4] ready
-- KEYS[5] scheduled  KEYS[6] signal
-- ARGV[1] entry   ARGV[2] retry_due_ms (0 = no retry)
-- Returns 1 when a lease was released, 0 when there was none.
local e = ARGV[1]
local retry_due = tonumber(ARGV[2])
local OFFSET = 9007199254740992

local released = redis.call('ZREM', KEYS[1], e)
if released == 1 then
  local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
  local woke = 0
  local function unpark(prefix)
    local p = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, 1)
    if p[1] then
      redis.call('ZREM', KEYS[3], p[1])
      local rest = string.sub(p[1], #prefix + 1)
      redis.call('ZADD', KEYS[4], tonumber(string.sub(rest, 1, 16), 16) - OFFSET, string.sub(rest, 18))
      woke = woke + 1
    end
  end
  local jfield = 'j:' .. job
  if redis.call('HINCRBY', KEYS[2], jfield, -1) <= 0 then redis.call('HDEL', KEYS[2], jfield) end
  if ckey ~= '' then
    local kfield = 'k:' .. job .. '|' .. ckey
    if redis.call('HINCRBY', KEYS[2], kfield, -1) <= 0 then redis.call('HDEL', KEYS[2], kfield) end
    unpark('K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|')
  end
  unpark('J|' .. job .. '|')
  if woke > 0 and redis.call('LLEN', KEYS[6]) < 8 then redis.call('RPUSH', KEYS[6], '1') end
end
if retry_due > 0 then
  redis.call('ZADD', KEYS[5], retry_due, e)
end
return released
