-- KEYS: meta, members
-- ARGV: now_ms, session_timeout_ms, member_id, member_epoch, subscribed_topics
-- ShareGroupHeartbeat (KIP-932).  ARGV[4] member epoch: 0 joins, -1 leaves, else a
-- heartbeat; ARGV[5] the subscribed topics as a JSON list ('': unchanged).  Members whose
-- session expired are dropped first.  Any change of the members or of a subscription bumps
-- the group epoch.
-- Returns {status, group epoch, members JSON {member id: [topics]}}: status 0 ok,
-- 1 unknown member (a heartbeat from a member not in the group).
local meta, members = KEYS[1], KEYS[2]
local now, timeout = tonumber(ARGV[1]), tonumber(ARGV[2])
local member_id, epoch, subscription = ARGV[3], tonumber(ARGV[4]), ARGV[5]

local group_epoch = tonumber(redis.call('HGET', meta, 'group_epoch') or '0')
local changed = false
local all = redis.call('HGETALL', members)
for i = 1, #all, 2 do
  if tonumber(cjson.decode(all[i + 1]).expiry) < now then
    redis.call('HDEL', members, all[i])
    changed = true
  end
end

local status = 0
local raw = redis.call('HGET', members, member_id)
if epoch == -1 then
  if raw then
    redis.call('HDEL', members, member_id)
    changed = true
  end
elseif epoch == 0 or raw then
  local m = raw and cjson.decode(raw) or {topics = {}}
  if not raw then changed = true end
  if subscription ~= '' then
    local topics = cjson.decode(subscription)
    if cjson.encode(topics) ~= cjson.encode(m.topics) then changed = true end
    m.topics = topics
  end
  m.expiry = now + timeout
  redis.call('HSET', members, member_id, cjson.encode(m))
else
  status = 1
end

if changed then
  group_epoch = group_epoch + 1
  redis.call('HSET', meta, 'group_epoch', group_epoch)
end
local view = {}
all = redis.call('HGETALL', members)
for i = 1, #all, 2 do
  local topics = cjson.decode(all[i + 1]).topics
  view[all[i]] = topics
end
local encoded = '{}'
if next(view) ~= nil then encoded = cjson.encode(view) end
return {status, group_epoch, encoded}
