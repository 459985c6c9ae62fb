--! include _kgroup.lua
-- Heartbeat (Kafka's handleHeartbeat).  ARGV[1] member id, ARGV[2] group.instance.id (''),
-- ARGV[3] generation.  Returns {error code} (0: keep going; 27: rejoin).
local member_id, instance_id, gen = ARGV[1], ARGV[2], tonumber(ARGV[3])
settle()
if redis.call('EXISTS', meta) == 0 then return {UNKNOWN_MEMBER_ID} end
if fenced(member_id, instance_id) then return {FENCED_INSTANCE_ID} end
if redis.call('HEXISTS', members, member_id) == 0 then return {UNKNOWN_MEMBER_ID} end
if gen ~= generation() then return {ILLEGAL_GENERATION} end
local current = state()
if current == 'Empty' then return {UNKNOWN_MEMBER_ID} end
touch(member_id)
if current == 'PreparingRebalance' then return {REBALANCE_IN_PROGRESS} end
return {NONE}
