-- KEYS: state
-- ARGV: topic_id
-- A partition of a topic just created (or of new partitions of a grown topic): the tombstone
-- an earlier topic of that name left (partition/delete.lua) goes, whole: its TTL must not stay
-- on the new partition's state, nor anything a stray writer added to it.  A tombstone of this
-- very topic (its id) stays: the topic was deleted after its creation, before this call.
-- KEYS[1] = the partition's state hash.  ARGV[1] = the topic's id.
-- Returns 1 (a tombstone removed), 0 (none there), -1 (this topic's own tombstone: deleted).
local state = KEYS[1]
if redis.call('HEXISTS', state, 'deleted') == 0 then return 0 end
if redis.call('HGET', state, 'topic_id') == ARGV[1] then return -1 end
redis.call('DEL', state)
return 1
