--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, member, generation
-- LEAVE: a member at the current generation leaves; the others get a new generation.
-- ARGV[3] = consumer id, ARGV[4] = generation.  Returns the new generation.
-- The generation keeps counting when the group becomes empty, so a member of an earlier
-- life of the group can never pass for a current one.
local member, generation = ARGV[3], ARGV[4]
local now = now_ms()
local group = load_group(now)
local refused = check_member(group, member, generation)
if refused then return refused end
redis.call('HDEL', members, member)
redis.call('HSET', meta, 'active_ms', fmt(now))
rebalance(group.generation + 1, group.assignor)
return group.generation + 1
