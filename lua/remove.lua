-- remove: take a run's entry out of every waiting set (cancel, expiry, job
-- deletion). A leased entry is left alone: its worker acks it when done.
--
-- KEYS[1] ready  KEYS[2] scheduled  KEYS[3] throttled  KEYS[4] parked
-- KEYS[5] fair (a tagged entry is parked at its tag: lib/fair.lua)
-- ARGV[1] entry
-- Returns the number of places the entry was removed from.
local e = ARGV[1]
local n = 0
for i = 1, 3 do n = n + redis.call('ZREM', KEYS[i], e) end
local run, job, rankhex, ckey = string.match(e, '^([^|]+)|([^|]+)|([^|]+)|(.*)$')
local fs = fair_open(KEYS[5], nil)
rankhex = fair_take(fs, e, job, rankhex)
fair_flush(fs)
n = n + redis.call('ZREM', KEYS[4], 'J|' .. job .. '|' .. rankhex .. '|' .. e)
n = n + redis.call('ZREM', KEYS[4], 'U|' .. job .. '|' .. rankhex .. '|' .. e)
if ckey ~= '' then
  n = n + redis.call('ZREM', KEYS[4], 'K|' .. job .. '|' .. #ckey .. ':' .. ckey .. '|' .. rankhex .. '|' .. e)
end
return n
