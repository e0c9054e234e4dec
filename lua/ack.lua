-- ack: end dispatches after their outcomes are committed in Postgres. For
-- each entry: drops the lease, frees the job's and the key's concurrency
-- slots, brings back one parked entry per freed slot, and, for a retry,
-- schedules the entry again. Called when a lease was already reaped (the
-- worker was too slow) it frees nothing twice, and still schedules a retry:
-- the Postgres record is the truth. Takes many entries per call so that a
-- busy worker acks a whole batch at once.
--
-- KEYS[1] leases  KEYS[2] active  KEYS[3] parked  KEYS[4] ready
-- KEYS[5] scheduled  KEYS[6] signal
-- ARGV: per entry two values: entry, retry_due_ms (0 = no retry)
-- Returns {how many leases were released, how many parked entries went
-- back to `ready`}.
-- free_slots and woke: lib/slots.lua.
local function release(e)
  if redis.call('ZREM', KEYS[1], e) == 0 then return 0 end
  free_slots(e)
  return 1
end

local released = 0
for i = 1, #ARGV, 2 do
  local e, retry_due = ARGV[i], tonumber(ARGV[i + 1])
  released = released + release(e)
  if retry_due > 0 then
    redis.call('ZADD', KEYS[5], retry_due, e)
  end
end
local wake = math.min(woke, 8 - redis.call('LLEN', KEYS[6]))
for _ = 1, wake do redis.call('RPUSH', KEYS[6], '1') end
return { released, woke }
