--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, member, generation, partition, offset
-- COMMIT: a member at the current generation stores the committed offset (the next offset
-- to read) of a partition it owns, and stays alive.  ARGV[3] = consumer id,
-- ARGV[4] = generation, ARGV[5] = partition, ARGV[6] = offset (decimal strings, stored as
-- sent, so any 64-bit offset is exact).  KEYS[5] (optional): the Kafka commit metadata
-- hash: a V1 commit carries no metadata and no leader epoch, so the partition's go, and
-- OffsetFetch answers none for this offset.  Returns the commit time (ms, Redis' clock):
-- the offsets mirror's record of it (mapping/group/offsets_mirror.py) carries it.
local member, generation, partition, offset = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local now = now_ms()
local group = load_group(now)
local refused = check_member(group, member, generation)
if refused then return refused end
local owned = false
for p in string.gmatch(redis.call('HGET', assignment, member) or '', '%d+') do
  if p == partition then owned = true end
end
if not owned then return mismatch('partition not assigned to member') end
redis.call('HSET', offsets, partition, offset)
if KEYS[5] then
  redis.call('HDEL', KEYS[5], partition, partition .. '.leader_epoch')
end
redis.call('HSET', members, member, fmt(now))
return now
