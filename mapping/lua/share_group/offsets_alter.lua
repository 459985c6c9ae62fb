-- KEYS: log
-- ARGV: consumer_group, last_id
-- AlterShareGroupOffsets on one share-partition: the Redis consumer group ARGV[1] of the
-- partition's log stream starts again after ARGV[2] (the id just before the new start
-- offset), with no records in flight: the group is created anew, so its PEL (records
-- acquired, released, their delivery counts) goes with the old one.  The stream is created
-- empty when the partition has no records yet.
-- Returns 1.
local log, cgroup, last_id = KEYS[1], ARGV[1], ARGV[2]

redis.pcall('XGROUP', 'DESTROY', log, cgroup)
redis.call('XGROUP', 'CREATE', log, cgroup, last_id, 'MKSTREAM')
return 1
