-- dequeue: take up to ARGV[2] entries from `ready`, lowest rank first
-- (highest priority, then oldest), leasing each until now + lease_ms.
-- An entry whose job or concurrency key is at its cap, or whose job is
-- paused, is parked instead, and comes back when a slot of that job or key
-- is released (ack.lua, reap.lua) or the job's limits change (set_limits.lua).
--
-- KEYS[1] ready   KEYS[2] leases   KEYS[3] active   KEYS[4] limits
-- KEYS[5] parked  KEYS[6] throttled
-- ARGV[1] now_ms  ARGV[2] max_items  ARGV[3] lease_ms  ARGV[4] max_scan
-- Returns the leased entries (possibly empty).
local now = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local lease_until = now + tonumber(ARGV[3])
local max_scan = tonumber(ARGV[4])

-- Entries held by a rate limit whose window has opened go back first.
local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 256)
for _, e in ipairs(due) do
  redis.call('ZREM', KEYS[6], e)
  local rankhex = string.match(e, '^[^|]+|[^|]+|([^|]+)|')
  redis.call('ZADD', KEYS[1], tonumber(rankhex, 16) - 9007199254740992, e)
end

local out = {}
local scanned = 0
local limits_cache = {}

local function limits_of(job)
  local l = limits_cache[job]
  if l == nil then
    local raw = redis.call('HGET', KEYS[4], job)
    -- max_concurrency|max_per_key|rate_max|rate_window_ms|paused
    l = { 0, 0, 0, 0, 0 }
    if raw then
      local i = 1
      for v in string.gmatch(raw, '[^|]+') do l[i] = tonumber(v); i = i + 1 end
    end
    limits_cache[job] = l
  end
  return l
end

while #out < want and scanned < max_scan do
  local batch = redis.call('ZRANGE', KEYS[1], 0, want - #out - 1)
  if #batch == 0 then break end
  for _, e in ipairs(batch) do
    scanned = scanned + 1
    redis.call('ZREM', KEYS[1], e)
    local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
    local lim = limits_of(job)
    local jfield = 'j:' .. job
    local kfield = 'k:' .. job .. '|' .. ckey
    local jactive = tonumber(redis.call('HGET', KEYS[3], jfield) or '0')
    if ckey ~= '' and lim[2] > 0 and tonumber(redis.call('HGET', KEYS[3], kfield) or '0') >= lim[2] then
      redis.call('ZADD', KEYS[5], 0, 'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. e)
      -- The job may still have a free slot that a job-parked entry is waiting
      -- for; hand it one so the slot does not idle until the next release.
      if lim[5] ~= 1 and (lim[1] == 0 or jactive < lim[1]) then
        local p = redis.call('ZRANGEBYLEX', KEYS[5], '[J|' .. job .. '|', '[J|' .. job .. '|\255', 'LIMIT', 0, 1)
        if p[1] then
          redis.call('ZREM', KEYS[5], p[1])
          local pe = string.sub(p[1], #job + 4 + 17)
          redis.call('ZADD', KEYS[1], tonumber(string.sub(p[1], #job + 4, #job + 19), 16) - 9007199254740992, pe)
        end
      end
    elseif lim[5] == 1 or (lim[1] > 0 and jactive >= lim[1]) then
      -- A paused job parks everything; resuming it brings them back.
      redis.call('ZADD', KEYS[5], 0, 'J|' .. job .. '|' .. rankhex .. '|' .. e)
    else
      redis.call('HINCRBY', KEYS[3], jfield, 1)
      if ckey ~= '' then redis.call('HINCRBY', KEYS[3], kfield, 1) end
      redis.call('ZADD', KEYS[2], lease_until, e)
      out[#out + 1] = e
    end
    if #out >= want or scanned >= max_scan then break end
  end
end
return out
