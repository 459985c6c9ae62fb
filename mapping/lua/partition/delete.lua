-- KEYS: log, state, ...
-- ARGV: tombstone_ms, topic_id
-- Delete one partition of a topic being deleted: its log and every other key of it go, and
-- its state hash becomes a tombstone {deleted = 1, topic_id = <the deleted topic's id>} that
-- expires after ARGV[1] ms.  Until then the partition scripts refuse it (UNKNOWN_TOPIC), so a
-- pod that still has the topic's settings cached cannot write into a half-deleted topic;
-- creating the topic again (another id) removes the tombstone at once
-- (partition/revive.lua), a creation of the deleted topic itself announced late does not.
-- KEYS = {log, state, every other key of the partition (replicas, producers, Spark sink
-- markers, ...)}.  ARGV[1] = tombstone lifetime (ms), ARGV[2] = the topic's id ('' unknown).
-- Returns the number of keys removed.
local state = KEYS[2]
local removed = redis.call('DEL', unpack(KEYS))
local topic_id = ARGV[2] or ''
if topic_id ~= '' then
  redis.call('HSET', state, 'deleted', '1', 'topic_id', topic_id)
else
  redis.call('HSET', state, 'deleted', '1')
end
redis.call('PEXPIRE', state, tonumber(ARGV[1]))
return removed
