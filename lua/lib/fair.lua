-- lib/fair: a job's concurrency keys served in turn (`fairness:
-- round_robin`, bit 2 of the flags field of the job's `limits`), for
-- enqueue.lua, promote.lua, dequeue.lua, remove.lua and extend_leases.lua.
--
-- Start-time fair queueing. An entry of such a job gets a tag when it
-- becomes ready (enqueued due now, or promoted from `scheduled`): the later
-- of the job's clock and the end of its key's previous tag, in the entry's
-- own priority band. The tag is its score in `ready` and its place among
-- parked entries; each tag is one rank unit (a millisecond of age) long.
-- The clock is the tag of the job's newest leased entry. So a key's
-- backlog lies one unit apart from the clock on, and a key with nothing
-- waiting starts at the clock: its entry comes next, whatever the other
-- keys hold. When none of the job's entries waits, the clock catches up
-- with the next entry's own age, so an idle job's first entry ranks as any
-- job's would. The clock never goes back.
--
-- Fields of the `fair` hash (its key is passed in by each script):
--   t:<run>        the tag of a waiting entry of the run (a decimal
--                  integer; the run's id is shorter than its entry)
--   n:<job>        how many of the job's entries hold a tag (absent: none)
--   v:<job>        the job's clock (ms of virtual age)
--   f:<job>|<key>  the end of the key's newest tag (ms of virtual age);
--                  once the clock passed it, it says nothing, and
--                  fair_sweep.lua drops it
-- A script call reads a job's and a key's fields once and writes them back
-- once (fair_flush), so a batch of one job's entries pays for them once.
-- All of it is rebuilt with the queue: the reconciler writes the jobs'
-- limits before it re-enqueues their runs.
local FAIR_OFFSET = 9007199254740992
local FAIR_BAND = 4398046511104

-- The field of entry `e`'s tag.
local function fair_t(e)
  return 't:' .. string.match(e, '^[^|]+')
end

-- Whether a job's limits field (`JobSpec::limits_field`) asks for fairness.
local function fair_flag(raw)
  local flags = raw and tonumber(string.match(raw, '^[^|]*|[^|]*|[^|]*|[^|]*|(%d+)') or '0') or 0
  return math.floor(flags / 2) % 2 == 1
end

-- This call's view of the hash at `fair_key` (and of the jobs' limits at
-- `limits_key`: nil for a call that only takes tags away).
local function fair_open(fair_key, limits_key)
  return { key = fair_key, limits = limits_key, jobs = {}, ends = {} }
end

-- A job as this call sees it: `fair` (new entries get tags) and `tagged`
-- (some of its entries may hold one: it is fair, or was when they were
-- tagged). `raw` is its limits field when the caller read it already.
local function fair_job(s, job, raw)
  local j = s.jobs[job]
  if j == nil then
    if raw == nil and s.limits then raw = redis.call('HGET', s.limits, job) end
    local fair = fair_flag(raw)
    local n = tonumber(redis.call('HGET', s.key, 'n:' .. job) or '0')
    j = { fair = fair, tagged = fair or n > 0, n = n, n0 = n }
    s.jobs[job] = j
  end
  return j
end

local function fair_clock(s, job, j)
  if j.v == nil then
    j.v = tonumber(redis.call('HGET', s.key, 'v:' .. job) or '0')
    j.v0 = j.v
  end
  return j.v
end

-- Tags entry `e` of `job` and key `ckey`, whose rank is `rank`; returns the
-- tag (a rank).
local function fair_tag(s, e, job, ckey, rank)
  local j = fair_job(s, job)
  local band = math.floor(rank / FAIR_BAND) * FAIR_BAND
  local v = fair_clock(s, job, j)
  if j.n <= 0 and rank - band > v then
    v = rank - band
    j.v = v
  end
  j.n = j.n + 1
  local kf = job .. '|' .. ckey
  local f = s.ends[kf]
  if f == nil then f = tonumber(redis.call('HGET', s.key, 'f:' .. kf) or '0') end
  local vt = math.max(v, f)
  s.ends[kf] = vt + 1
  redis.call('HSET', s.key, fair_t(e), string.format('%d', band + vt))
  return band + vt
end

-- The tag `e` holds, or nil.
local function fair_tag_of(s, e)
  local t = redis.call('HGET', s.key, fair_t(e))
  if t then return tonumber(t) end
  return nil
end

-- A tag as a parked member writes a rank: 16 hex of tag + 2^53, as
-- `Entry::encode` does. Spelled out in two parts, since the sum itself is
-- past the integers a Lua number holds exactly, and a rounded tag would
-- tie parked entries a turn apart.
local function fair_hex(tag)
  if tag >= 0 then return '002' .. string.format('%013x', tag) end
  return '001' .. string.format('%013x', tag + FAIR_OFFSET / 2)
end

-- Drops the tag of entry `e`, which leaves the waiting sets without being
-- leased (cancelled, expired, its lease taken back after a rebuild).
local function fair_untag(s, e, job)
  redis.call('HDEL', s.key, fair_t(e))
  local j = fair_job(s, job)
  j.n = j.n - 1
end

-- Entry `e` of `job` leaves the waiting sets without being leased: drops
-- its tag, if it holds one, and returns the rank its parked member is
-- written with (the tag's, else `rankhex`, its own).
local function fair_take(s, e, job, rankhex)
  local tag = fair_tag_of(s, e)
  if not tag then return rankhex end
  fair_untag(s, e, job)
  return fair_hex(tag)
end

-- Entry `e`, ranked `score` in `ready`, is leased: if it held a tag (its
-- score), the clock moves on to it. One call, where fair_tag_of and
-- fair_untag take two: dequeue does this for every entry of a fair job.
local function fair_leased(s, e, job, score)
  if redis.call('HDEL', s.key, fair_t(e)) == 1 then
    local j = fair_job(s, job)
    j.n = j.n - 1
    local vt = score - math.floor(score / FAIR_BAND) * FAIR_BAND
    if vt > fair_clock(s, job, j) then j.v = vt end
  end
end

-- Writes back what this call changed.
local function fair_flush(s)
  for job, j in pairs(s.jobs) do
    if j.n ~= j.n0 then
      if j.n > 0 then
        redis.call('HSET', s.key, 'n:' .. job, j.n)
      else
        redis.call('HDEL', s.key, 'n:' .. job)
      end
    end
    if j.v ~= j.v0 then redis.call('HSET', s.key, 'v:' .. job, string.format('%d', j.v)) end
  end
  for kf, f in pairs(s.ends) do
    redis.call('HSET', s.key, 'f:' .. kf, string.format('%d', f))
  end
end
