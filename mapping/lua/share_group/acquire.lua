-- KEYS: log, state
-- ARGV: consumer_group, member_id, lock_ms, max_records, delivery_limit, start_id,
--   sequence_bits
-- ShareFetch's acquisition on one share-partition, which rides on the Redis consumer group
-- ARGV[1] of the partition's log stream (created at ARGV[6], '$' latest or '0' earliest,
-- when missing).  First the records whose lock expired (or that were released: their idle
-- time is set past the lock) are claimed by XAUTOCLAIM, which counts one more delivery;
-- those past the delivery limit ARGV[5] are archived (XACK) instead.  Then new records are
-- read by XREADGROUP, never past the high watermark (the state's hw: the last offset
-- readers may see).  Transaction markers are never handed out: they are acknowledged on
-- sight.  At most ARGV[4] records.
-- Returns {{entry id, delivery count, fields}, ...}, in no particular order.
local log, state = KEYS[1], KEYS[2]
local cgroup, member = ARGV[1], ARGV[2]
local lock_ms, max_records, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local scale = 2 ^ tonumber(ARGV[7])

if redis.call('EXISTS', log) == 0 then return {} end
redis.pcall('XGROUP', 'CREATE', log, cgroup, ARGV[6])

local function offset_of(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) * scale + tonumber(seq)
end

local out = {}
local function take(id, count, fields)
  if fields[1] == 'ctl' then
    redis.call('XACK', log, cgroup, id)
  else
    out[#out + 1] = {id, count, fields}
  end
end

-- 1. expired locks and released records
local cursor, rounds = '0-0', 0
repeat
  local claimed = redis.call('XAUTOCLAIM', log, cgroup, member, lock_ms, cursor,
    'COUNT', max_records - #out)
  cursor = claimed[1]
  for _, e in ipairs(claimed[2]) do
    local pending = redis.call('XPENDING', log, cgroup, e[1], e[1], 1)
    local count = pending[1] and tonumber(pending[1][4]) or 1
    if count > limit then
      redis.call('XACK', log, cgroup, e[1]) -- archived: delivered too often
    else
      take(e[1], count, e[2])
    end
  end
  rounds = rounds + 1
until cursor == '0-0' or #out >= max_records or rounds >= 10

-- 2. new records, below the high watermark
if #out < max_records then
  local hw = tonumber(redis.call('HGET', state, 'hw') or '')
  local last = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', log)) do
    local name, delivered = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == cgroup then last = delivered end
  end
  if last then
    local ahead = redis.call('XRANGE', log, '(' .. last, '+', 'COUNT', max_records - #out)
    local n = 0
    for _, e in ipairs(ahead) do
      if hw and offset_of(e[1]) > hw then break end
      n = n + 1
    end
    if n > 0 then
      local read = redis.call('XREADGROUP', 'GROUP', cgroup, member, 'COUNT', n,
        'STREAMS', log, '>')
      if read and read[1] then
        for _, e in ipairs(read[1][2]) do take(e[1], 1, e[2]) end
      end
    end
  end
end
return out
