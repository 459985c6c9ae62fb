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
local function proceed()
  return {K.NONE, fmt(commit_token())}
end
-- a member of the group under the KIP-848 protocol: the generation is its member epoch
local consumer = redis.call('HGET', cmember, member_id)
if consumer then
  if now > tonumber(redis.call('HGET', cmembers, member_id) or '0') then
    return {K.UNKNOWN_MEMBER_ID}
  end
  if cjson.decode(consumer).epoch ~= gen then return {K.STALE_MEMBER_EPOCH} end
  return proceed()
end
if redis.call('EXISTS', meta) == 0 then
  if gen < 0 then return proceed() end
  -- a KIP-848 group that does not know the member (gone, or expired): Kafka's answer
  if redis.call('EXISTS', cmeta) == 1 then return {K.UNKNOWN_MEMBER_ID} end
  return {K.ILLEGAL_GENERATION}
end
local current = state()
if gen < 0 and current == 'Empty' then return proceed() end
if current == 'CompletingRebalance' then return {K.REBALANCE_IN_PROGRESS} end
if fenced(member_id, instance_id) then return {K.FENCED_INSTANCE_ID} end
if redis.call('HEXISTS', members, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end
if gen ~= generation() then return {K.ILLEGAL_GENERATION} end
touch(member_id)
return proceed()
