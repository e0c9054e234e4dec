-- reap: take back the leases that expired before ARGV[1] (their worker died
-- or stalled), freeing their slots exactly as ack.lua does. The entries are
-- returned, not re-queued: the caller asks Postgres what each run needs
-- (redelivery, a retry later, or nothing because it already finished).
--
-- KEYS[1] leases  KEYS[2] active  KEYS[3] parked  KEYS[4] ready  KEYS[5] signal
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns {how many parked entries went back to `ready`, the expired entries}.
-- free_slots and woke: lib/slots.lua.
local now = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, e in ipairs(expired) do
  redis.call('ZREM', KEYS[1], e)
  free_slots(e)
end
if woke > 0 and redis.call('LLEN', KEYS[5]) < 8 then redis.call('RPUSH', KEYS[5], '1') end
return { woke, expired }
