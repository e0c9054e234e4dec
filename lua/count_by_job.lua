-- count_by_job: how many entries of each given job every set holds, for
-- the stats of a project. Read-only. The waiting sets are not indexed by
-- job, so this walks them (in slices, to bound the memory of one reply):
-- its cost grows with the queue's size, which is why it serves an
-- operator's poll, never a hot path. `parked` is keyed by job, so its
-- counts are two lexicographic counts per job.
--
-- KEYS[1] ready  KEYS[2] scheduled  KEYS[3] throttled  KEYS[4] leases  KEYS[5] parked
-- ARGV[1..n] job ids
-- Returns, per job in ARGV order, five numbers: ready, scheduled,
-- throttled, leased, parked.
local counts = {}
for i = 1, #ARGV do counts[ARGV[i]] = {0, 0, 0, 0} end
local SLICE = 1000
for k = 1, 4 do
  local n = redis.call('ZCARD', KEYS[k])
  local from = 0
  while from < n do
    local slice = redis.call('ZRANGE', KEYS[k], from, from + SLICE - 1)
    for _, e in ipairs(slice) do
      local job = string.match(e, '^[^|]*|([^|]*)|')
      local c = job and counts[job]
      if c then c[k] = c[k] + 1 end
    end
    from = from + SLICE
  end
end
local out = {}
for i = 1, #ARGV do
  local job = ARGV[i]
  local c = counts[job]
  local parked = redis.call('ZLEXCOUNT', KEYS[5], '[J|' .. job .. '|', '[J|' .. job .. '|\255')
    + redis.call('ZLEXCOUNT', KEYS[5], '[K|' .. job .. '|', '[K|' .. job .. '|\255')
    + redis.call('ZLEXCOUNT', KEYS[5], '[U|' .. job .. '|', '[U|' .. job .. '|\255')
  out[#out + 1] = c[1]
  out[#out + 1] = c[2]
  out[#out + 1] = c[3]
  out[#out + 1] = c[4]
  out[#out + 1] = parked
end
return out
