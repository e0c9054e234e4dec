-- lib/buckets: the rate-limit buckets of a job, read from its `limits`
-- field (see dequeue.lua for the encoding), shared by record_dispatch.lua
-- and extend_leases.lua; scripts.rs puts it in front of each. A job
-- without a field has none.
local function rate_buckets(limits_key, job)
  local raw = redis.call('HGET', limits_key, job)
  local out = {}
  if not raw then return out end
  local p = {}
  for v in string.gmatch(raw, '[^|]+') do p[#p + 1] = v end
  if tonumber(p[3] or '0') > 0 and tonumber(p[4] or '0') > 0 then out[#out + 1] = 'j:' .. job end
  for i = 6, #p - 2, 3 do out[#out + 1] = p[i + 2] end
  return out
end

