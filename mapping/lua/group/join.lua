--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, member, assignor
-- JOIN: add (or refresh) a member.  ARGV[3] = consumer id, ARGV[4] = assignor ('' keeps the
-- group's; a new group gets round_robin).  A new member or a changed assignor starts one new
-- generation (both at once: still one); a current member with the same assignor only
-- refreshes its heartbeat.  The first generation of a group is 1.
-- Returns {generation, the member's partitions ("0 3 6")}.
local member, wanted = ARGV[3], ARGV[4]
local now = now_ms()
local group = load_group(now)
local generation, assignor = 0, 'round_robin'
if group then generation, assignor = group.generation, group.assignor end
if wanted ~= '' then assignor = wanted end
local known = redis.call('HEXISTS', members, member) == 1
redis.call('HSET', members, member, fmt(now))
if not group or not known or assignor ~= group.assignor then
  generation = generation + 1
  rebalance(generation, assignor)
end
return {generation, redis.call('HGET', assignment, member) or ''}
