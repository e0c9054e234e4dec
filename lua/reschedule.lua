-- reschedule: give entries that are still in `scheduled` a later due time,
-- because their runs may not start yet (the job's execution window is
-- closed). An entry no longer in `scheduled` (another scheduler promoted or
-- dropped it) is left alone: XX only updates existing members.
--
-- KEYS[1] scheduled
-- ARGV[1] new due ms   ARGV[2..] entries
-- Returns how many entries were moved.
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[i])
end
return n
