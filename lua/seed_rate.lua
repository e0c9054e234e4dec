-- seed_rate: after Redis lost its data, put back into a rate-limit bucket's
-- dispatch log the sends Postgres recorded in its window (the reconciler's
-- rebuild, before the epoch lets rate-limited jobs dispatch again), so the
-- bucket restarts where it was instead of admitting a full window at once.
--
-- KEYS[1] rate
-- ARGV[1] bucket, then per send two values: sent ms, run_id
-- Returns the number of sends logged.
local first = ARGV[1] .. '|'
local n = 0
for i = 2, #ARGV, 2 do
  n = n + redis.call('ZADD', KEYS[1], 0, first .. string.format('%016x', tonumber(ARGV[i])) .. '|' .. ARGV[i + 1])
end
return n
