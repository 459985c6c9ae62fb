--! include lib/kmixed.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: ...
-- LeaveGroup, also in batches (v3+: members named by member id and/or group.instance.id).
-- ARGV = member id, instance id, member id, instance id, ... ('' for absent).
-- Returns one error code per member, in order; classic members of a consumer group leave
-- it (lib/kmixed.lua).
settle()
local codes, removed = {}, false
local exists = redis.call('EXISTS', meta) == 1
for i = 1, #ARGV, 2 do
  local member_id, instance_id = ARGV[i], ARGV[i + 1]
  local mixed = classic_leave(member_id, instance_id) -- (a member of a consumer group)
  local code = mixed or K.NONE
  if mixed then -- (answered)
  elseif not exists then
    code = K.UNKNOWN_MEMBER_ID
  elseif instance_id ~= '' then
    local owner = redis.call('HGET', static, instance_id)
    if not owner then
      code = K.UNKNOWN_MEMBER_ID
    elseif member_id ~= '' and owner ~= member_id then
      code = K.FENCED_INSTANCE_ID
    else
      remove_member(owner)
      removed = true
    end
  elseif redis.call('HEXISTS', members, member_id) == 1 then
    remove_member(member_id)
    removed = true
  elseif redis.call('HDEL', pending_ids, member_id) == 0 then
    code = K.UNKNOWN_MEMBER_ID
  end
  codes[#codes + 1] = code
end
if removed then
  after_removal()
  maybe_complete_join()
  publish('left')
end
return codes
