-- KEYS: offsets, offset_metadata
-- ARGV: ...
-- OffsetDelete / DeleteGroups: forget committed offsets (and their metadata and leader
-- epochs) of a (group, topic).  KEYS[1] offsets, KEYS[2] offset_metadata.  ARGV =
-- partitions; none: all of them.  Returns 1.
if #ARGV == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
for _, p in ipairs(ARGV) do
  redis.call('HDEL', KEYS[1], p)
  redis.call('HDEL', KEYS[2], p, p .. '.leader_epoch')
end
return 1
