-- hit_client_rate: count one API request of a client address against its
-- per-minute buckets (global, job trigger, bulk trigger; see docs/contract.md,
-- "Limits"), all or nothing: when any bucket is full, nothing is counted and
-- the request is refused. Fixed windows: a bucket's window starts with its
-- first request and lasts ARGV[1] ms (the counter's TTL).
--
-- KEYS[i] a bucket counter of one client (all share the client's hash tag)
-- ARGV[1] window length in ms
-- ARGV[i + 1] the limit of KEYS[i]
-- Returns {0, 0} when counted, or {i, ms}: KEYS[i] is full for ms more.
local window = tonumber(ARGV[1])
for i = 1, #KEYS do
  local n = tonumber(redis.call('GET', KEYS[i]) or '0')
  if n >= tonumber(ARGV[i + 1]) then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], window)
      ttl = window
    end
    return { i, ttl }
  end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], window)
  end
end
return { 0, 0 }
