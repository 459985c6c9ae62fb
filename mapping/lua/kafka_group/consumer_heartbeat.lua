--! include lib/kconsumer.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: session_timeout_ms, member_id, member_epoch, instance_id,
--   rack_id, client_id, client_host, rebalance_timeout_ms, subscribed_topics, server_assignor,
--   owned, partition_counts, subscription
-- ConsumerGroupHeartbeat (KIP-848).  ARGV[1] session timeout (ms), ARGV[2] member id,
-- ARGV[3] member epoch (0: join, -1: leave, -2: static member's temporary leave, else the
-- member's epoch), ARGV[4] instance id, ARGV[5] rack id, ARGV[6] client id, ARGV[7] client
-- host, ARGV[8] rebalance timeout (ms), ARGV[9] subscribed topics as a JSON list ('':
-- unchanged), ARGV[10] server assignor ('': unchanged), ARGV[11] owned partitions as JSON
-- {topic: [p]} ('': not sent), ARGV[12] partition counts JSON {topic: n} of the topics the
-- caller knows the group uses (changes start a new epoch), ARGV[13] the member's
-- subscription as it sent it, JSON {names = [topics], regex} ('': unchanged): ARGV[9] is
-- what it resolves to (its names and the topics its regex matches), ARGV[13] is kept to be
-- described and matched again.
-- Returns reconcile's answer, the target request (see lib/kconsumer.lua) or {error code}.
local session_timeout, member_id, epoch = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local subscription, assignor_name = ARGV[9], ARGV[10]
local owned = nil
if ARGV[11] ~= '' then owned = cjson.decode(ARGV[11]) end

settle()
settle_consumers()
-- memberships are per protocol: a classic group with members refuses this one
if redis.call('HLEN', members) > 0 then return {K.INCONSISTENT_GROUP_PROTOCOL} end

-- partition counts: a subscribed topic that grew (or appeared) starts a new epoch
local subscribed_topics = {}
for _, raw in ipairs(redis.call('HVALS', cmember)) do
  for _, t in ipairs(cjson.decode(raw).subscribed) do subscribed_topics[t] = true end
end
for topic, count in pairs(cjson.decode(ARGV[12])) do
  local before = tonumber(redis.call('HGET', ctopics, topic) or '0')
  if before ~= count then
    redis.call('HSET', ctopics, topic, count)
    if subscribed_topics[topic] then bump_epoch() end
  end
end

local m = decode_member(member_id)
if epoch == -1 or epoch == -2 then
  if m then remove_consumer(member_id) end
  publish('consumer-left')
  return {K.NONE, member_id, epoch, ''}
end

local full = false
if epoch == 0 then
  if m then remove_consumer(member_id) end -- a member starting over
  m = {epoch = 0, previous_epoch = 0, assigned = {}, revoking = {}, sent = '',
    subscribed = {}, assignor = ''}
  full = true
  bump_epoch()
elseif not m then
  return {K.UNKNOWN_MEMBER_ID}
elseif epoch ~= m.epoch and epoch ~= m.previous_epoch then
  return {K.FENCED_MEMBER_EPOCH}
end
m.instance_id, m.rack_id, m.client_id, m.client_host = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if tonumber(ARGV[8]) > 0 then m.rebalance_timeout_ms = tonumber(ARGV[8]) end
if subscription ~= '' then
  local wanted = cjson.decode(subscription)
  table.sort(wanted)
  if cjson.encode(wanted) ~= cjson.encode(m.subscribed) then
    m.subscribed = wanted
    if epoch ~= 0 then bump_epoch() end
  end
  full = true
end
if ARGV[13] ~= '' then
  local sent = cjson.decode(ARGV[13])
  m.names, m.regex = sent.names, sent.regex
end
if assignor_name ~= '' and assignor_name ~= m.assignor then
  m.assignor = assignor_name
  if epoch ~= 0 then bump_epoch() end
end
store_member_state(member_id, m)
redis.call('HSET', cmembers, member_id, fmt(now + session_timeout))

local needed = target_request()
if needed then return needed end
return reconcile(member_id, owned, full)
