-- KEYS: meta, members, topics
-- ARGV: now_ms, session_timeout_ms, member_id, member_epoch, subscribed_topics, client
-- ShareGroupHeartbeat (KIP-932).  ARGV[4] member epoch: 0 joins, -1 leaves, else a
-- heartbeat; ARGV[5] the subscribed topics as a JSON list ('': unchanged).  Members whose
-- session expired are dropped first.  Any change of the members or of a subscription bumps
-- the group epoch.  Each member keeps its member epoch (the group epoch its last answer
-- carried) and the one before: a heartbeat must carry one of the two (the answer with the
-- newer one may have been lost), as Kafka's share group coordinator checks; any other is
-- fenced.  A join (epoch 0) of a known member starts it again.  Every topic subscribed
-- is added to the topics set (where the group may have state: admin APIs and deletion read
-- it).  ARGV[6], the member's client as JSON {client_id, host, rack} ('': unchanged), is
-- kept for ShareGroupDescribe.
-- Returns {status, group epoch, members JSON {member id: [topics]}, gone JSON}: status 0
-- ok, 1 unknown member (a heartbeat from a member not in the group), 2 fenced (an epoch
-- that is not the member's); gone: {member id: [topics]} of the members that left or whose
-- session expired in this call ('{}': none), whose records in flight the caller releases.
local meta, members, group_topics = KEYS[1], KEYS[2], KEYS[3]
local now, timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
local member_id, epoch, subscription, client = ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]

local group_epoch = tonumber(redis.call('HGET', meta, 'group_epoch') or '0')
local changed = false
local gone = {}
local all = redis.call('HGETALL', members)
for i = 1, #all, 2 do
  local m = cjson.decode(all[i + 1])
  if tonumber(m.expiry) < now then
    redis.call('HDEL', members, all[i])
    gone[all[i]] = m.topics
    changed = true
  end
end

local status = 0
local raw = redis.call('HGET', members, member_id)
local m = nil
if epoch == -1 then
  if raw then
    redis.call('HDEL', members, member_id)
    gone[member_id] = cjson.decode(raw).topics
    changed = true
  end
elseif epoch == 0 or raw then
  m = raw and cjson.decode(raw) or {topics = {}}
  if epoch == 0 then
    if raw then changed = true end -- a rejoin: a new member under the same id
    m.epoch, m.previous = 0, 0
  elseif m.epoch ~= nil and epoch ~= m.epoch and epoch ~= m.previous then
    status = 2
  end
  if status == 0 then
    if not raw then changed = true end
    if subscription ~= '' then
      local topics = cjson.decode(subscription)
      if cjson.encode(topics) ~= cjson.encode(m.topics) then
        changed = true
        if #topics > 0 then redis.call('SADD', group_topics, unpack(topics)) end
      end
      m.topics = topics
    end
    if client ~= '' then m.client = cjson.decode(client) end
    m.expiry = now + timeout
  end
else
  status = 1
end

if changed then
  group_epoch = group_epoch + 1
  redis.call('HSET', meta, 'group_epoch', group_epoch)
end
if m and status == 0 then
  if m.epoch ~= group_epoch then m.previous, m.epoch = m.epoch or 0, group_epoch end
  redis.call('HSET', members, member_id, cjson.encode(m))
end
local view = {}
all = redis.call('HGETALL', members)
for i = 1, #all, 2 do
  local topics = cjson.decode(all[i + 1]).topics
  view[all[i]] = topics
end
local encoded, departed = '{}', '{}'
if next(view) ~= nil then encoded = cjson.encode(view) end
if next(gone) ~= nil then departed = cjson.encode(gone) end
return {status, group_epoch, encoded, departed}
