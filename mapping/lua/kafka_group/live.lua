--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: none
-- How many members of the Kafka group (classic or KIP-848) have a running session, without
-- changing anything (for V1 JOIN's check: memberships are per protocol).  Returns a count.
local live = consumer_members_live()
local flat = redis.call('HGETALL', members)
for i = 1, #flat, 2 do
  -- members waiting in JoinGroup do not expire (see lib/kgroup.lua)
  if tonumber(flat[i + 1]) >= now or redis.call('HEXISTS', joining, flat[i]) == 1 then
    live = live + 1
  end
end
return live
