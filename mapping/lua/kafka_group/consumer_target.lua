--! include lib/kconsumer.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: session_timeout_ms, group_epoch, target, assignor, member_id,
--   owned, full, partition_counts
-- Store the target assignment the caller computed for group epoch ARGV[2] (JSON
-- {member: {topic: [p]}} in ARGV[3], assignor name ARGV[4]) unless the epoch moved on
-- meanwhile, then answer member ARGV[5] as kafka_group/consumer_heartbeat does (ARGV[6] owned
-- partitions JSON or '', ARGV[7] '1' to send the assignment in any case).
-- ARGV[1] session timeout (ms). ARGV[8] JSON {topic: n}: the partition counts the target was
-- computed with for topics the group had none of (an upgraded classic group's), kept as the
-- counts a heartbeat would have brought.
local epoch, member_id = tonumber(ARGV[2]), ARGV[5]
local owned = nil
if ARGV[6] ~= '' then owned = cjson.decode(ARGV[6]) end
settle_consumers()
if epoch == cnum('group_epoch') and epoch > cnum('target_epoch') then
  local target = cjson.decode(ARGV[3])
  redis.call('DEL', ctarget)
  for _, id in ipairs(redis.call('HKEYS', cmembers)) do
    redis.call('HSET', ctarget, id, cjson.encode(target[id] or {}))
  end
  redis.call('HSET', cmeta, 'target_epoch', epoch, 'assignor', ARGV[4])
  for topic, count in pairs(cjson.decode(ARGV[8])) do
    redis.call('HSETNX', ctopics, topic, count)
  end
  publish('consumer-target ' .. epoch)
end
if redis.call('HEXISTS', cmembers, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end
local needed = target_request()
if needed then return needed end
return reconcile(member_id, owned, ARGV[7] == '1')
