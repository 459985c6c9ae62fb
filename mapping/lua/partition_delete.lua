-- Delete one partition of a topic being deleted: its log and replica streams go, and its
-- state hash becomes a tombstone {deleted = 1} that expires after ARGV[1] ms.  Until then the
-- partition scripts refuse it (UNKNOWN_TOPIC), so a pod that still has the topic's settings
-- cached cannot write into a half-deleted topic; creating the topic again removes the
-- tombstone at once (mapping/store.py creation_commands).
-- KEYS = {log, state, every other key of the partition (replicas, Spark sink markers, ...)}.
-- Returns the number of keys removed.
local state = KEYS[2]
local removed = redis.call('DEL', unpack(KEYS))
redis.call('HSET', state, 'deleted', '1')
redis.call('PEXPIRE', state, tonumber(ARGV[1]))
return removed
