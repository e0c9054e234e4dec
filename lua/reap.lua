-- reap: take back the leases that expired before ARGV[1] (their worker died
-- or stalled), freeing their slots exactly as ack.lua does. The entries are
-- returned, not re-queued: the caller asks Postgres what each run needs
-- (redelivery, a retry later, or nothing because it already finished).
--
-- KEYS[1] leases  KEYS[2] active  KEYS[3] parked  KEYS[4] ready  KEYS[5] signal
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns the expired entries.
local now = tonumber(ARGV[1])
local OFFSET = 9007199254740992
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
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
for _, e in ipairs(expired) do
  redis.call('ZREM', KEYS[1], e)
  local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
  local jfield = 'j:' .. job
  if redis.call('HINCRBY', KEYS[2], jfield, -1) <= 0 then redis.call('HDEL', KEYS[2], jfield) end
  if ckey ~= '' then
    local kfield = 'k:' .. job .. '|' .. ckey
    if redis.call('HINCRBY', KEYS[2], kfield, -1) <= 0 then redis.call('HDEL', KEYS[2], kfield) end
    unpark('K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|')
  end
  unpark('J|' .. job .. '|')
end
if woke > 0 and redis.call('LLEN', KEYS[5]) < 8 then redis.call('RPUSH', KEYS[5], '1') end
return expired
