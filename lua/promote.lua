-- promote: move entries of `scheduled` whose time has come (retries, delayed
-- runs) into `ready` at their own rank, and wake idle workers.
--
-- KEYS[1] scheduled  KEYS[2] ready  KEYS[3] signal
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns {moved, ms until the next scheduled entry is due or -1 when none}.
local now = tonumber(ARGV[1])
local OFFSET = 9007199254740992
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, e in ipairs(due) do
  redis.call('ZREM', KEYS[1], e)
  local rankhex = string.match(e, '^[^|]+|[^|]+|([^|]+)|')
  redis.call('ZADD', KEYS[2], tonumber(rankhex, 16) - OFFSET, e)
end
if #due > 0 and redis.call('LLEN', KEYS[3]) < 8 then redis.call('RPUSH', KEYS[3], '1') end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return { #due, wait }
