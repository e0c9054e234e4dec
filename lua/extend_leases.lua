-- extend_leases: push the expiry of leases this worker still holds. A lease
-- that is gone (reaped) is not recreated: XX only updates existing members.
--
-- KEYS[1] leases
-- ARGV[1] new expiry ms   ARGV[2..] entries
-- Returns how many leases were extended.
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[i])
end
return n
