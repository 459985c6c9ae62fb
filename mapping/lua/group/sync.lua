--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, member, generation
-- SYNC: a member at the current generation fetches its assignment (and stays alive).
-- ARGV[3] = consumer id, ARGV[4] = generation.  Returns {generation, partitions "0 3 6"}.
local member, generation = ARGV[3], ARGV[4]
local now = now_ms()
local group = load_group(now)
local refused = check_member(group, member, generation)
if refused then return refused end
redis.call('HSET', members, member, fmt(now))
return {group.generation, redis.call('HGET', assignment, member) or ''}
