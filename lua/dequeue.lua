-- dequeue: take up to ARGV[2] entries from `ready`, lowest rank first
-- (highest priority, then oldest), leasing each until now + lease_ms.
-- An entry whose job or concurrency key is at its cap, or whose job is
-- paused, is parked instead, and comes back when a slot of that job or key
-- is released (ack.lua, reap.lua) or the job's limits change (set_limits.lua).
-- An entry whose job is at a rate limit (its own rate_limit_max per window,
-- or a named limit shared by its project) goes to `throttled`, scored with
-- the time the fullest window lets it through; due throttled entries come
-- back to `ready` at the start of every call. A leased entry holds a
-- provisional place in the dispatch log of each of its buckets (`rate`)
-- until its worker records the real send time (record_dispatch.lua).
--
-- Rate windows are sliding: a bucket admits while it holds fewer than `max`
-- provisional places plus sends younger than window + guard (ARGV[5], see
-- RATE_GUARD_MS), so no window of `window` ms, measured at the target, sees
-- more than `max` requests. Older sends are trimmed from the log; a
-- provisional place that is never confirmed (the worker died, the run was
-- no longer dispatchable) lapses after lease + window + guard.
--
-- After Redis lost its data the in-flight counts and rate logs are gone
-- with it, so nothing that depends on them is decided until they are back:
-- an entry of a job with no `limits` field (not pushed yet: a job's
-- limits are always written, "0|0|0|0|0" for none) is parked under
-- `U|<job>|` until set_limits.lua brings it back, and while the epoch
-- marker is missing (not rebuilt) or younger than its hold (the workers
-- re-registering the dispatches they still hold, extend_leases.lua), an
-- entry of a capped or rate-limited job waits in `throttled`.
--
-- A job with `fairness: round_robin` serves its concurrency keys in turn:
-- its entries are ranked by their tags (lib/fair.lua), parked with them,
-- and come back from `throttled` with them.
--
-- A call that stops at its scan limit (max_scan entries parked or
-- throttled) with entries still in `ready` leaves a wake-up token: a worker
-- waits for one as soon as a dequeue returns fewer entries than it asked for.
--
-- KEYS[1] ready   KEYS[2] leases   KEYS[3] active   KEYS[4] limits
-- KEYS[5] parked  KEYS[6] throttled  KEYS[7] rate  KEYS[8] signal
-- KEYS[9] epoch ("<id>|<hold until ms>", set by the reconciler's rebuild)
-- KEYS[10] fair (lib/fair.lua)
-- ARGV[1] now_ms  ARGV[2] max_items  ARGV[3] lease_ms  ARGV[4] max_scan
-- ARGV[5] rate_guard_ms  ARGV[6] rate_recheck_ms (how soon to look again
-- when a bucket is full of provisional places)
-- ARGV[7] how long a held entry waits while the epoch is missing (ms)
-- Returns the epoch id ('' when missing), then the leased entries.
local now = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local lease_until = now + tonumber(ARGV[3])
local max_scan = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[3])
local guard = tonumber(ARGV[5] or '0')
local recheck = tonumber(ARGV[6] or '50')
local OFFSET = 9007199254740992
local unbuilt_wait = tonumber(ARGV[7] or '250')

-- The epoch: which Redis this is, and until when the workers may still be
-- re-registering what they held before it was rebuilt.
local epoch = redis.call('GET', KEYS[9])
local epoch_id, hold_until = '', now + unbuilt_wait
if epoch then
  local id, h = string.match(epoch, '^([^|]*)|?(%d*)$')
  epoch_id, hold_until = id or epoch, tonumber(h) or 0
end

local out = { epoch_id }
local fs = fair_open(KEYS[10], KEYS[4])
local scanned = 0
local limits_cache = {}
-- Per job, this call's throttle decision: later entries of a throttled job
-- are spread over the following windows instead of all coming back at once.
local throttle_cache = {}

local function limits_of(job)
  local l = limits_cache[job]
  if l == nil then
    local raw = redis.call('HGET', KEYS[4], job)
    -- max_concurrency|max_per_key|rate_max|rate_window_ms|flags (1
    -- paused, 2 round robin) then |max|window_ms|bucket for each named
    -- rate limit.
    local p = {}
    if raw then
      for v in string.gmatch(raw, '[^|]+') do p[#p + 1] = v end
    end
    l = { tonumber(p[1] or '0'), tonumber(p[2] or '0'), tonumber(p[3] or '0'), tonumber(p[4] or '0'),
          tonumber(p[5] or '0'), buckets = {}, known = raw ~= false and raw ~= nil }
    l.paused = l[5] % 2 == 1
    -- Whether the job's entries may hold tags: it is fair, or was when
    -- some of them were tagged.
    l.tagged = fair_job(fs, job, raw).tagged
    if l[3] > 0 and l[4] > 0 then
      l.buckets[#l.buckets + 1] = { max = l[3], span = l[4] + guard, id = 'j:' .. job }
    end
    for i = 6, #p - 2, 3 do
      local max, win = tonumber(p[i]), tonumber(p[i + 1])
      if max and win and max > 0 and win > 0 then
        l.buckets[#l.buckets + 1] = { max = max, span = win + guard, id = p[i + 2] }
      end
    end
    limits_cache[job] = l
  end
  return l
end

-- A bucket's log: sends `<bucket>|<sent ms hex>|<run>`, then (`~` sorts
-- after hex digits) provisional places `<bucket>|~<lapse ms hex>|<run>`.
-- Returns 0 when every bucket of the job admits a dispatch now, else
-- {ms when the fullest window admits one, that bucket}.
local function rate_wait(lim)
  local wait, binding = 0, nil
  for _, b in ipairs(lim.buckets) do
    local first = b.id .. '|'
    redis.call('ZREMRANGEBYLEX', KEYS[7], '[' .. first, '(' .. first .. string.format('%016x', math.max(0, now - b.span + 1)))
    redis.call('ZREMRANGEBYLEX', KEYS[7], '[' .. first .. '~', '(' .. first .. '~' .. string.format('%016x', now))
    local n = redis.call('ZLEXCOUNT', KEYS[7], '[' .. first, '[' .. first .. '\255')
    if n >= b.max then
      -- The window opens when the entry `max` places from the newest ages
      -- out; a provisional one is confirmed within moments, so look again soon.
      local m = redis.call('ZRANGEBYLEX', KEYS[7], '[' .. first, '[' .. first .. '\255', 'LIMIT', n - b.max, 1)
      local at = now + recheck
      if string.sub(m[1], #first + 1, #first + 1) ~= '~' then
        at = tonumber(string.sub(m[1], #first + 1, #first + 16), 16) + b.span
      end
      if at > wait then wait, binding = at, b end
    end
  end
  return wait, binding
end

-- Entries held by a rate limit whose window has opened go back first, with
-- their tags if they hold one.
local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 256)
for _, e in ipairs(due) do
  redis.call('ZREM', KEYS[6], e)
  local job, rankhex = string.match(e, '^[^|]+|([^|]+)|([^|]+)|')
  local tag = limits_of(job).tagged and fair_tag_of(fs, e)
  redis.call('ZADD', KEYS[1], tag or (tonumber(rankhex, 16) - OFFSET), e)
end

-- The rank a parked entry is written with: its tag, if it holds one, so
-- it comes back in its turn.
local function park_rank(lim, e, rankhex)
  local tag = lim.tagged and fair_tag_of(fs, e)
  return tag and fair_hex(tag) or rankhex
end

while #out - 1 < want and scanned < max_scan do
  local batch = redis.call('ZRANGE', KEYS[1], 0, want - #out, 'WITHSCORES')
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local e = batch[i]
    scanned = scanned + 1
    redis.call('ZREM', KEYS[1], e)
    local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
    local lim = limits_of(job)
    local jfield = 'j:' .. job
    local kfield = 'k:' .. job .. '|' .. ckey
    local jactive = tonumber(redis.call('HGET', KEYS[3], jfield) or '0')
    if not lim.known then
      -- Limits unknown: never treated as none. set_limits.lua brings it back.
      redis.call('ZADD', KEYS[5], 0, 'U|' .. job .. '|' .. park_rank(lim, e, rankhex) .. '|' .. e)
    elseif not lim.paused and now < hold_until and (lim[1] > 0 or lim[2] > 0 or #lim.buckets > 0) then
      -- Its counts may not be back yet: look again when they are.
      redis.call('ZADD', KEYS[6], hold_until, e)
    elseif ckey ~= '' and lim[2] > 0 and tonumber(redis.call('HGET', KEYS[3], kfield) or '0') >= lim[2] then
      redis.call('ZADD', KEYS[5], 0, 'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. park_rank(lim, e, rankhex) .. '|' .. e)
      -- The job may still have a free slot that a job-parked entry is waiting
      -- for; hand it one so the slot does not idle until the next release.
      if not lim.paused and (lim[1] == 0 or jactive < lim[1]) then
        local p = redis.call('ZRANGEBYLEX', KEYS[5], '[J|' .. job .. '|', '[J|' .. job .. '|\255', 'LIMIT', 0, 1)
        if p[1] then
          redis.call('ZREM', KEYS[5], p[1])
          local pe = string.sub(p[1], #job + 4 + 17)
          redis.call('ZADD', KEYS[1], tonumber(string.sub(p[1], #job + 4, #job + 19), 16) - OFFSET, pe)
        end
      end
    elseif lim.paused or (lim[1] > 0 and jactive >= lim[1]) then
      -- A paused job parks everything; resuming it brings them back.
      redis.call('ZADD', KEYS[5], 0, 'J|' .. job .. '|' .. park_rank(lim, e, rankhex) .. '|' .. e)
    else
      local t = throttle_cache[job]
      local wait, binding = 0, nil
      if t then
        t.n = t.n + 1
        wait = t.at + math.floor(t.n / t.max) * t.span
      elseif #lim.buckets > 0 then
        wait, binding = rate_wait(lim)
        if wait > 0 then throttle_cache[job] = { at = wait, n = 0, max = binding.max, span = binding.span } end
      end
      if wait > 0 then
        redis.call('ZADD', KEYS[6], wait, e)
      else
        for _, b in ipairs(lim.buckets) do
          local lapse = now + lease_ms + b.span
          redis.call('ZADD', KEYS[7], 0, b.id .. '|~' .. string.format('%016x', lapse) .. '|' .. run)
        end
        redis.call('HINCRBY', KEYS[3], jfield, 1)
        if ckey ~= '' then redis.call('HINCRBY', KEYS[3], kfield, 1) end
        -- Its score in `ready` is its tag, if it holds one.
        if lim.tagged then fair_leased(fs, e, job, tonumber(batch[i + 1])) end
        redis.call('ZADD', KEYS[2], lease_until, e)
        out[#out + 1] = e
      end
    end
    if #out - 1 >= want or scanned >= max_scan then break end
  end
end
fair_flush(fs)
if #out - 1 < want and scanned >= max_scan and redis.call('ZCARD', KEYS[1]) > 0
    and redis.call('LLEN', KEYS[8]) < 8 then
  redis.call('RPUSH', KEYS[8], '1')
end
return out
