-- KEYS: log
-- ARGV: consumer_group, member_id, lock_ms, sequence_bits, ...
-- ShareAcknowledge (and ShareFetch's piggybacked acknowledgements) on one share-partition.
-- The tail is one group of four per acknowledgement batch: first entry id, last entry id,
-- first offset, types (comma-separated: one type for the whole range, or one per offset).
-- Types: 0 gap (nothing), 1 accept (XACK), 2 release (the entry stays pending, its idle
-- time set past the lock so that the next acquisition claims it, its delivery count kept),
-- 3 reject (XACK: archived, never delivered again), 4 renew (the member keeps the entry and
-- its lock starts again: XCLAIM by the same consumer with IDLE 0 and JUSTID, which leaves
-- the delivery count as it is).  Only entries this member holds are acknowledged: pending
-- for it and idle no longer than the lock (an entry whose lock expired, or that was
-- released, is no longer the member's even before another acquisition claims it).
-- Returns the number of batches that named records the member does not hold.
local log, cgroup, member = KEYS[1], ARGV[1], ARGV[2]
local lock_ms, scale = tonumber(ARGV[3]), 2 ^ tonumber(ARGV[4])

local function offset_of(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) * scale + tonumber(seq)
end

local refused = 0
for i = 5, #ARGV, 4 do
  local first_offset = tonumber(ARGV[i + 2])
  local types = {}
  for t in string.gmatch(ARGV[i + 3], '%d+') do types[#types + 1] = tonumber(t) end
  local wanted = false
  for _, t in ipairs(types) do if t ~= 0 then wanted = true end end
  local held = {}
  if redis.call('EXISTS', log) == 1 then
    local ok, reply = pcall(redis.call, 'XPENDING', log, cgroup, ARGV[i], ARGV[i + 1],
      1000000, member)
    if ok then
      for _, p in ipairs(reply) do
        if tonumber(p[3]) <= lock_ms then held[#held + 1] = p end
      end
    end
  end
  if wanted and #held == 0 then refused = refused + 1 end
  for _, p in ipairs(held) do
    local id = p[1]
    local t = types[1]
    if #types > 1 then t = types[offset_of(id) - first_offset + 1] or 0 end
    if t == 1 or t == 3 then
      redis.call('XACK', log, cgroup, id)
    elseif t == 2 then
      redis.call('XCLAIM', log, cgroup, member, 0, id, 'IDLE', lock_ms + 1, 'JUSTID')
    elseif t == 4 then
      redis.call('XCLAIM', log, cgroup, member, 0, id, 'IDLE', 0, 'JUSTID')
    end
  end
end
return refused
