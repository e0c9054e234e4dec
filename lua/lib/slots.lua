-- lib/slots: freeing the concurrency slots of an entry that leaves
-- `leases`, shared by ack.lua and reap.lua. Redis has no way to share code
-- between scripts, so shared/src/queue/scripts.rs puts this file in front
-- of each of them when it loads them: one chunk, so `free_slots` and `woke`
-- are theirs. Uses KEYS[2] active, KEYS[3] parked, KEYS[4] ready.
local OFFSET = 9007199254740992
-- Parked entries this call moved back to `ready`.
local woke = 0

-- Moves the first parked entry under `prefix` back to `ready`, with the
-- rank it was parked with.
local function unpark(prefix)
  local p = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. prefix, '[' .. prefix .. '\255', 'LIMIT', 0, 1)
  if p[1] then
    redis.call('ZREM', KEYS[3], p[1])
    local rest = string.sub(p[1], #prefix + 1)
    redis.call('ZADD', KEYS[4], tonumber(string.sub(rest, 1, 16), 16) - OFFSET, string.sub(rest, 18))
    woke = woke + 1
  end
end

-- Frees the job's slot (and the concurrency key's) that entry `e` held,
-- and brings back one parked entry for each slot freed.
local function free_slots(e)
  local _, job, _, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
  local jfield = 'j:' .. job
  if redis.call('HINCRBY', KEYS[2], jfield, -1) <= 0 then redis.call('HDEL', KEYS[2], jfield) end
  if ckey ~= '' then
    local kfield = 'k:' .. job .. '|' .. ckey
    if redis.call('HINCRBY', KEYS[2], kfield, -1) <= 0 then redis.call('HDEL', KEYS[2], kfield) end
    unpark('K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|')
  end
  unpark('J|' .. job .. '|')
end

