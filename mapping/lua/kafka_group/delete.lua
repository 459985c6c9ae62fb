--! include lib/kconsumer.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: none
-- DeleteGroups' Kafka half: the group's classic and KIP-848 state goes (Dead) unless members
-- of either are live.
-- Returns {0} deleted (or nothing was there), {NON_EMPTY_GROUP}.
settle()
settle_consumers()
if redis.call('HLEN', members) > 0 or redis.call('HLEN', cmembers) > 0 then
  return {K.NON_EMPTY_GROUP}
end
redis.call('DEL', meta, members, info, protocols, joining, generation_of, assignment, static,
  pending_ids, cmeta, cmembers, cmember, ctarget, ctopics)
publish('deleted')
return {K.NONE}
