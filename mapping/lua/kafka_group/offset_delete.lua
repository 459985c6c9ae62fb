--! include lib/clock.lua
-- KEYS: offsets, offset_metadata
-- ARGV: ...
-- OffsetDelete / DeleteGroups: forget committed offsets (and their metadata and leader
-- epochs) of a (group, topic).  KEYS[1] offsets, KEYS[2] offset_metadata.  ARGV =
-- partitions; none: all of them.  Returns {the deletion time (ms, Redis' clock), the
-- partitions that had an offset...}: the offsets mirror's tombstones (mapping/group/offsets_mirror.py).
local reply = {now_ms()}
if #ARGV == 0 then
  for _, p in ipairs(redis.call('HKEYS', KEYS[1])) do reply[#reply + 1] = p end
  redis.call('DEL', KEYS[1], KEYS[2])
  return reply
end
for _, p in ipairs(ARGV) do
  if redis.call('HDEL', KEYS[1], p) == 1 then reply[#reply + 1] = p end
  redis.call('HDEL', KEYS[2], p, p .. '.leader_epoch')
end
return reply
