-- remove_scheduled: drop the named entries from `scheduled` because their
-- runs need no dispatch any more (finished, cancelled, deleted). Each entry
-- goes only if it is still due by ARGV[1], the "now" the caller read it at:
-- an entry scheduled again since then (a new retry) has a later score and
-- stays.
--
-- KEYS[1] scheduled
-- ARGV[1] now_ms  ARGV[2..] entries to drop
-- Returns how many entries were removed.
local now = tonumber(ARGV[1])
local removed = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= now then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
