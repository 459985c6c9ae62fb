--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: member_id
-- A JoinGroup waiting in the barrier checks again (woken by an event or its deadline).
-- ARGV[1] member id.  Returns what kafka_group/join does: its answer once the barrier completed
-- with it, {WAIT, ms} while still open, {UNKNOWN_MEMBER_ID} when it was removed meanwhile.
local member_id = ARGV[1]
local until_ms = settle()
if redis.call('HEXISTS', members, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end
if redis.call('HEXISTS', joining, member_id) == 1 then return wait_reply(until_ms) end
return join_answer(member_id, false)
