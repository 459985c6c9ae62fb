--! include lib/kconsumer.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: none
-- ConsumerGroupDescribe / ListGroups data of the KIP-848 group.
-- Returns {exists (0/1), state, group epoch, target epoch, assignor,
--          member id, member JSON, target JSON, ...}.
settle_consumers()
if redis.call('EXISTS', cmeta) == 0 then return {0, 'Dead', -1, -1, ''} end
local group_epoch, target_epoch = cnum('group_epoch'), cnum('target_epoch')
local flat = redis.call('HGETALL', cmember)
local state = 'Stable'
if #flat == 0 then
  state = 'Empty'
elseif group_epoch > target_epoch then
  state = 'Assigning'
end
local reply = {1, state, group_epoch, target_epoch, redis.call('HGET', cmeta, 'assignor') or ''}
for i = 1, #flat, 2 do
  local m = cjson.decode(flat[i + 1])
  local target = redis.call('HGET', ctarget, flat[i]) or '{}'
  if state == 'Stable' and (m.epoch < target_epoch or next(m.revoking) ~= nil
      or canonical(to_set(m.assigned)) ~= canonical(to_set(cjson.decode(target)))) then
    state = 'Reconciling'
  end
  reply[#reply + 1] = flat[i]
  reply[#reply + 1] = flat[i + 1]
  reply[#reply + 1] = target
end
reply[2] = state
return reply
