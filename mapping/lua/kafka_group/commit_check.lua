--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: member_id, instance_id, generation
-- OffsetCommit's membership check (Kafka's handleCommitOffsets); the offsets themselves are
-- written by kafka_group/offset_commit (another slot: the (group, topic) offsets V1 shares), only
-- where no newer token than this check's was used since (see commit_token in lib/kgroup.lua).
-- ARGV[1] member id, ARGV[2] group.instance.id (''), ARGV[3] generation (-1: a commit by a
-- client outside group management, allowed while the group has no members).
-- Returns {error code}, or {0, token}: the commit may proceed with that fence token (and
-- the member's session is refreshed).
local member_id, instance_id, gen = ARGV[1], ARGV[2], tonumber(ARGV[3])
settle()
local refusal = commit_refusal(member_id, instance_id, gen, false)
if refusal then return {refusal} end
return {K.NONE, fmt(commit_token())}
