--! include lib/kmixed.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: session_timeout_ms, member_id, member_epoch, instance_id,
--   rack_id, client_id, client_host, rebalance_timeout_ms, subscribed_topics, server_assignor,
--   owned, partition_counts, subscription, classic
-- ConsumerGroupHeartbeat (KIP-848).  ARGV[1] session timeout (ms), ARGV[2] member id,
-- ARGV[3] member epoch (0: join, -1: leave, -2: static member's temporary leave, else the
-- member's epoch), ARGV[4] instance id ('': not sent), ARGV[5] rack id ('': not sent),
-- ARGV[6] client id, ARGV[7] client host, ARGV[8] rebalance timeout (ms), ARGV[9]
-- subscribed topics as a JSON list ('': unchanged), ARGV[10] server assignor ('':
-- unchanged), ARGV[11] owned partitions as JSON {topic: [p]} ('': not sent), ARGV[12]
-- partition counts JSON {topic: n} of the topics the
-- caller knows the group uses (changes start a new epoch), ARGV[13] the member's
-- subscription as it sent it, JSON {names = [topics], regex} ('': unchanged): ARGV[9] is
-- what it resolves to (its names and the topics its regex matches), ARGV[13] is kept to be
-- described and matched again. ARGV[14] a classic member's JoinGroup (lib/kmixed.lua): JSON
-- {session_timeout_ms, protocols = [names], version} ('': a ConsumerGroupHeartbeat); a
-- known member rejoining keeps its place, whatever ARGV[3] says.
-- A consumer joining a classic group upgrades it (lib/kmixed.lua's upgrade_classic).
-- Static members (an instance id, KIP-345 under KIP-848) as in Kafka: a member that leaves
-- with -2 stays in the group at epoch -2, its partitions kept for it and nobody else, until
-- its session runs out; a join with its instance id meanwhile takes its place under the new
-- member id (its assignment and target, with no new group epoch unless the subscription
-- changed); a join while the instance id's member is active gets UNRELEASED_INSTANCE_ID;
-- a request with the instance id of another member id, FENCED_INSTANCE_ID.
-- Returns reconcile's answer, the target request (see lib/kconsumer.lua) or {error code}.
local session_timeout, member_id, epoch = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local instance_id = ARGV[4]
local subscription, assignor_name = ARGV[9], ARGV[10]
local owned = nil
if ARGV[11] ~= '' then owned = cjson.decode(ARGV[11]) end
local classic = nil
if ARGV[14] ~= '' then classic = cjson.decode(ARGV[14]) end

settle()
settle_consumers()
if redis.call('HLEN', members) > 0 then
  -- the group went back to the classic protocol since the JoinGroup was routed here
  if classic then return {K.REBALANCE_IN_PROGRESS} end
  -- a member of the consumer group this was before (it expired, and the classic members
  -- went back): unknown, so it joins again, which upgrades the group anew
  if epoch ~= 0 then return {K.UNKNOWN_MEMBER_ID} end
  local refusal = upgrade_classic()
  if refusal then return {refusal} end
end

-- partition counts: a subscribed topic that grew (or appeared) starts a new epoch; and the
-- member holding the request's instance id, if any
local subscribed_topics, holder = {}, nil
local states = redis.call('HGETALL', cmember)
for i = 1, #states, 2 do
  local state = cjson.decode(states[i + 1])
  for _, t in ipairs(state.subscribed) do subscribed_topics[t] = true end
  if instance_id ~= '' and state.instance_id == instance_id then holder = states[i] end
end
for topic, count in pairs(cjson.decode(ARGV[12])) do
  local before = tonumber(redis.call('HGET', ctopics, topic) or '0')
  if before ~= count then
    redis.call('HSET', ctopics, topic, count)
    if subscribed_topics[topic] then bump_epoch() end
  end
end

local m = decode_member(member_id)
if classic then
  -- no member of the consumer protocol left: the classic members join as a classic group
  if downgrade_if_classic_only() then return {K.UNKNOWN_MEMBER_ID} end
  epoch = (m and m.epoch) or 0
end
if epoch ~= 0 and instance_id ~= '' then
  if not holder then return {K.UNKNOWN_MEMBER_ID} end
  if holder ~= member_id then return {K.FENCED_INSTANCE_ID} end
end
if epoch == -2 then -- (only with an instance id: the caller checks)
  m.assigned = from_set(minus(to_set(m.assigned), to_set(m.revoking)))
  m.revoking, m.epoch, m.revoke_deadline = {}, -2, 0
  store_member_state(member_id, m)
  bump_fence(cmeta) -- what it was giving up may go to others now
  publish('consumer-left')
  return {K.NONE, member_id, epoch, ''}
end
if epoch == -1 then
  if m then remove_consumer(member_id) end
  publish('consumer-left')
  return {K.NONE, member_id, epoch, ''}
end

local full, fresh = false, false
if epoch == 0 then
  local replaced = nil
  if holder then
    replaced = decode_member(holder)
    -- (a classic static member that starts again replaces its old self, as in Kafka)
    if replaced.epoch ~= -2 and not classic then return {K.UNRELEASED_INSTANCE_ID} end
  end
  if m and member_id ~= holder then remove_consumer(member_id) end -- a member starting over
  if replaced then
    -- the static member comes back under this member id: its place, no new group epoch
    local target = redis.call('HGET', ctarget, holder)
    forget_consumer(holder)
    if target then redis.call('HSET', ctarget, member_id, target) end
    bump_fence(cmeta) -- the old member id's commits are stale from now on
    m = replaced
    m.epoch, m.previous_epoch, m.sent = 0, 0, ''
  else
    m = {epoch = 0, previous_epoch = 0, assigned = {}, revoking = {}, sent = '',
      subscribed = {}, assignor = ''}
    fresh = true
    bump_epoch()
  end
  full = true
elseif not m then
  return {K.UNKNOWN_MEMBER_ID}
elseif m.epoch == -2 or (epoch ~= m.epoch and epoch ~= m.previous_epoch) then
  return {K.FENCED_MEMBER_EPOCH}
end
if classic then m.classic, m.rejoin_deadline = classic, 0 end
if instance_id ~= '' then m.instance_id = instance_id end
if ARGV[5] ~= '' then m.rack_id = ARGV[5] end
m.client_id, m.client_host = ARGV[6], ARGV[7]
if tonumber(ARGV[8]) > 0 then m.rebalance_timeout_ms = tonumber(ARGV[8]) end
if subscription ~= '' then
  local wanted = cjson.decode(subscription)
  table.sort(wanted)
  if cjson.encode(wanted) ~= cjson.encode(m.subscribed) then
    m.subscribed = wanted
    if not fresh then bump_epoch() end
  end
  full = true
end
if ARGV[13] ~= '' then
  local sent = cjson.decode(ARGV[13])
  m.names, m.regex = sent.names, sent.regex
end
if assignor_name ~= '' and assignor_name ~= m.assignor then
  m.assignor = assignor_name
  if not fresh then bump_epoch() end
end
store_member_state(member_id, m)
redis.call('HSET', cmembers, member_id, fmt(now + session_timeout))

local needed = target_request()
if needed then return needed end
return reconcile(member_id, owned, full)
