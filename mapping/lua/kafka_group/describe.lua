--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: summary
-- DescribeGroups / ListGroups data, after applying what time decided.  ARGV[1] '1' for the
-- summary only (ListGroups).  Returns {exists (0/1), state, protocol type, protocol,
-- generation, member id, instance id, client id, client host, metadata, assignment, ...}.
local summary = ARGV[1] == '1'
settle()
if redis.call('EXISTS', meta) == 0 then return {0, 'Dead', '', '', -1} end
local m = redis.call('HMGET', meta, 'protocol_type', 'protocol')
local reply = {1, state(), m[1] or '', m[2] or '', generation()}
if summary then return reply end
for _, id in ipairs(redis.call('HKEYS', members)) do
  local i = member_info(id)
  local _, by_name = member_protocols(id)
  reply[#reply + 1] = id
  reply[#reply + 1] = i.instance_id
  reply[#reply + 1] = i.client_id
  reply[#reply + 1] = i.client_host
  reply[#reply + 1] = by_name[m[2]] or ''
  reply[#reply + 1] = redis.call('HGET', assignment, id) or ''
end
return reply
