--! include lib/kmixed.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: member_id, instance_id, generation, protocol_type, protocol_name,
--   recheck, ...
-- SyncGroup (Kafka's handleSyncGroup).  ARGV[1] member id, ARGV[2] group.instance.id (''),
-- ARGV[3] generation, ARGV[4] protocol type ('' when the request has none), ARGV[5]
-- protocol name (''), ARGV[6] '1' on a waiting follower's re-check (no assignments then),
-- ARGV[7..] member id, assignment, ... (the leader's).
-- Returns {0, assignment, protocol type, protocol}, {WAIT, ms} for a follower until the
-- leader's assignment is stored (or the group rebalances), {error code}, or for a classic
-- member of a consumer group lib/kmixed.lua's classic_sync answer.
local member_id, instance_id, gen = ARGV[1], ARGV[2], tonumber(ARGV[3])
local protocol_type, protocol_name, recheck = ARGV[4], ARGV[5], ARGV[6] == '1'
settle()
local mixed = classic_sync(member_id, instance_id, gen, protocol_type, protocol_name)
if mixed then return mixed end
if redis.call('EXISTS', meta) == 0 then return {K.UNKNOWN_MEMBER_ID} end
if fenced(member_id, instance_id) then return {K.FENCED_INSTANCE_ID} end
if redis.call('HEXISTS', members, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end
local m = redis.call('HMGET', meta, 'protocol_type', 'protocol', 'leader')
if (protocol_type ~= '' and protocol_type ~= m[1]) or (protocol_name ~= '' and protocol_name ~= m[2]) then
  return {K.INCONSISTENT_GROUP_PROTOCOL}
end
if gen ~= generation() then return {K.ILLEGAL_GENERATION} end
local current = state()
if current == 'Empty' then return {K.UNKNOWN_MEMBER_ID} end
if current == 'PreparingRebalance' then return {K.REBALANCE_IN_PROGRESS} end
touch(member_id)
if current == 'CompletingRebalance' then
  if m[3] ~= member_id or recheck then return wait_reply(next_expiry(nil)) end
  for i = 7, #ARGV, 2 do
    if redis.call('HEXISTS', members, ARGV[i]) == 1 then
      redis.call('HSET', assignment, ARGV[i], ARGV[i + 1])
    end
  end
  redis.call('HSET', meta, 'state', 'Stable')
  publish('synced ' .. gen)
end
return {K.NONE, redis.call('HGET', assignment, member_id) or '', m[1] or '', m[2] or ''}
