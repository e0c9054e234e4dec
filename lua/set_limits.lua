-- set_limits: record a job's caps and rate limit, read by dequeue.lua, and
-- bring back parked entries that a raised or removed cap now admits.
--
-- KEYS[1] limits  KEYS[2] parked  KEYS[3] ready  KEYS[4] signal
-- ARGV[1] job_id  ARGV[2] the job's field (`JobSpec::limits_field`; empty
--                 string: the job is gone)
-- ARGV[3] how many parked entries to bring back at most
-- Returns the number of entries brought back.
local job = ARGV[1]
local OFFSET = 9007199254740992
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], job)
else
  redis.call('HSET', KEYS[1], job, ARGV[2])
end
-- Everything parked for this job goes back to ready; dequeue re-parks what
-- the new limits still hold. Bounded per call; the caller repeats.
local moved = 0
for _, prefix in ipairs({ 'J|' .. job .. '|', 'K|' .. job .. '|', 'U|' .. job .. '|' }) do
  local ps = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, tonumber(ARGV[3]) - moved)
  for _, p in ipairs(ps) do
    redis.call('ZREM', KEYS[2], p)
    local rankhex, e
    if string.sub(p, 1, 1) ~= 'K' then
      rankhex, e = string.match(p, '^[JU]|[^|]+|([^|]+)|(.*)$')
    else
      local len, tail = string.match(p, '^K|[^|]+|(%d+):(.*)$')
      tail = string.sub(tail, tonumber(len) + 2)
      rankhex, e = string.match(tail, '^([^|]+)|(.*)$')
    end
    redis.call('ZADD', KEYS[3], tonumber(rankhex, 16) - OFFSET, e)
    moved = moved + 1
  end
end
if moved > 0 and redis.call('LLEN', KEYS[4]) < 8 then redis.call('RPUSH', KEYS[4], '1') end
return moved
