-- record_dispatch: log, in every rate limit bucket of the run's job, that
-- the run's request is being sent now, replacing the provisional place
-- dequeue.lua gave it. Windows then count real send times, which is what a
-- target sees. The send is logged even when the provisional place has
-- lapsed or is gone: counting a real send twice is safe, missing it is not.
--
-- KEYS[1] limits  KEYS[2] rate
-- ARGV[1] job_id  ARGV[2] run_id  ARGV[3] now_ms
-- Returns the number of buckets the send was logged in.
-- rate_buckets: lib/buckets.lua.
local job, run, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local buckets = rate_buckets(KEYS[1], job)
local suffix = '|' .. run
for _, b in ipairs(buckets) do
  local first = b .. '|'
  -- Provisional places are few: only dispatches admitted and not yet sent.
  for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], '[' .. first .. '~', '[' .. first .. '~\255')) do
    if string.sub(m, -#suffix) == suffix then redis.call('ZREM', KEYS[2], m) end
  end
  redis.call('ZADD', KEYS[2], 0, first .. string.format('%016x', now) .. suffix)
end
return #buckets
