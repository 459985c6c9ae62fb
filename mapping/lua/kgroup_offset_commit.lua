--! include _clock.lua
-- OffsetCommit's write: a Kafka group's committed offsets in the same hash V1 COMMIT/OFFSET
-- use (Keys.group(group, topic).offsets: partition -> next offset to read), the commit
-- metadata beside it, and the commit time as the (group, topic)'s activity (meta's
-- active_ms, what offsets retention counts from, as for V1 commits).
-- KEYS[1] offsets, KEYS[2] offset_metadata, KEYS[3] meta (V1's, of the same (group, topic)).
-- ARGV = partition, offset, metadata, ... (decimal strings; '' metadata: none).  Returns 1.
local offsets, metadata, meta = KEYS[1], KEYS[2], KEYS[3]
for i = 1, #ARGV, 3 do
  redis.call('HSET', offsets, ARGV[i], ARGV[i + 1])
  if ARGV[i + 2] == '' then
    redis.call('HDEL', metadata, ARGV[i])
  else
    redis.call('HSET', metadata, ARGV[i], ARGV[i + 2])
  end
end
redis.call('HSET', meta, 'active_ms', fmt(now_ms()))
return 1
