--! include lib/kmixed.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: member_id, instance_id, generation
-- Heartbeat (Kafka's handleHeartbeat).  ARGV[1] member id, ARGV[2] group.instance.id (''),
-- ARGV[3] generation.  Returns {error code} (0: keep going; 27: rejoin); a classic member
-- of a consumer group is answered by lib/kmixed.lua.
local member_id, instance_id, gen = ARGV[1], ARGV[2], tonumber(ARGV[3])
settle()
local mixed = classic_heartbeat(member_id, instance_id, gen)
if mixed then return mixed end
if redis.call('EXISTS', meta) == 0 then return {K.UNKNOWN_MEMBER_ID} end
if fenced(member_id, instance_id) then return {K.FENCED_INSTANCE_ID} end
if redis.call('HEXISTS', members, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end
if gen ~= generation() then return {K.ILLEGAL_GENERATION} end
local current = state()
if current == 'Empty' then return {K.UNKNOWN_MEMBER_ID} end
touch(member_id)
if current == 'PreparingRebalance' then return {K.REBALANCE_IN_PROGRESS} end
return {K.NONE}
