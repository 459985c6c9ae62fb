-- KEYS: offsets, offset_metadata
-- ARGV: token, ...
-- OffsetFetch of named partitions of a (group, topic), and the fence of each raised to the
-- fetcher's token (kafka_group/fence's answer): a member of a new generation reads the offsets
-- it starts from here, so a stale commit of an older generation (see kafka_group/offset_commit)
-- must not land after this read either, even before the new member's first commit.
-- Nothing is raised where the (group, topic) has no offsets (no key is made by a read).
-- KEYS[1] offsets, KEYS[2] offset_metadata.  ARGV[1] the token, ARGV[2..] partitions.
-- Returns {offsets, metadata, leader epochs}: one list each, in ARGV's order (nil: none).
local offsets, metadata = KEYS[1], KEYS[2]
local token = tonumber(ARGV[1])
local raise = redis.call('EXISTS', offsets) == 1
local found, details, epochs = {}, {}, {}
for i = 2, #ARGV do
  local p = ARGV[i]
  if raise and token > tonumber(redis.call('HGET', metadata, p .. '.fence') or '0') then
    redis.call('HSET', metadata, p .. '.fence', ARGV[1])
  end
  found[i - 1] = redis.call('HGET', offsets, p)
  details[i - 1] = redis.call('HGET', metadata, p)
  epochs[i - 1] = redis.call('HGET', metadata, p .. '.leader_epoch')
end
return {found, details, epochs}
