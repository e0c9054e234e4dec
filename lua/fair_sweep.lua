-- fair_sweep: drop the key ends (`f:<job>|<key>`) of `fair` that no
-- longer say anything (lib/fair.lua): the job's clock has passed them, or
-- none of the job's entries waits. Dequeue leaves them, so that a lease
-- costs no lookup of its key; the reconciler walks the hash with this
-- script, a slice per call, so that keys seen once do not pile up.
--
-- KEYS[1] fair
-- ARGV[1] HSCAN cursor ('0' to start)  ARGV[2] fields to look at per call
-- Returns {the next cursor ('0': the walk is done), fields dropped}.
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'MATCH', 'f:*', 'COUNT', tonumber(ARGV[2]))
local fields = r[2]
local jobs, dropped = {}, 0
for i = 1, #fields, 2 do
  local field, f = fields[i], tonumber(fields[i + 1])
  local job = string.match(field, '^f:([^|]+)|')
  local j = jobs[job]
  if j == nil then
    j = {
      idle = not redis.call('HGET', KEYS[1], 'n:' .. job),
      v = tonumber(redis.call('HGET', KEYS[1], 'v:' .. job) or '0'),
    }
    jobs[job] = j
  end
  -- max(clock, end) is the clock, or one unit past it: the end adds nothing.
  if j.idle or f == nil or f <= j.v + 1 then
    redis.call('HDEL', KEYS[1], field)
    dropped = dropped + 1
  end
end
return { r[1], dropped }
