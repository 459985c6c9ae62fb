-- KEYS: log
-- ARGV: consumer_group
-- DeleteShareGroupOffsets (and DeleteGroups of a share group) on one share-partition: the
-- Redis consumer group ARGV[1] of the partition's log stream goes, with its PEL; the next
-- acquisition creates it again where share.auto.offset.reset says.
-- Returns 1 when there was one, 0 otherwise.
local log, cgroup = KEYS[1], ARGV[1]

if redis.call('EXISTS', log) == 0 then return 0 end
return redis.pcall('XGROUP', 'DESTROY', log, cgroup) == 1 and 1 or 0
