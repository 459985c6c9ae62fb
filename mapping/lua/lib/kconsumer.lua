--! include lib/kgroup.lua
-- Shared by the kafka_group/consumer_* scripts: the group under the KIP-848 consumer protocol
-- (ConsumerGroupHeartbeat), keys KEYS[11..15] (see lib/kgroup.lua):
--   consumer:meta     group_epoch, target_epoch, assignor (the target's), commit_fence
--                     (see lib/kgroup.lua)
--   consumer:members  member id -> session expiry (ms, Redis clock)
--   consumer:member   member id -> JSON {epoch, previous_epoch, instance_id, rack_id,
--                     client_id, client_host, rebalance_timeout_ms, subscribed = [topics],
--                     names = [topics], regex (what it subscribed with: subscribed is
--                     its names and the topics its regex matched when it last heartbeat),
--                     assignor, assigned = {topic = [p]}, revoking = {topic = [p]}, sent,
--                     revoke_deadline}
--   consumer:target   member id -> JSON {topic = [p]}: its target assignment (target_epoch)
--   consumer:topics   topic -> partition count last seen (a change means a new epoch)
-- The group epoch goes up on every change of membership, subscription, assignor or
-- partition count; the target assignment is computed for it by the caller (the server-side
-- assignor runs in Python, mapping/kafka_group/assignors.py) and stored only if the epoch
-- did not move meanwhile.  Members then converge on their target as in Kafka: a member first
-- gives up what is no longer its own (its epoch stays until it reported so), then moves to
-- the target epoch and gets the target partitions nobody else still holds.
-- K.NEED_TARGET is not an error: the caller computes the target assignment.

local function cnum(field)
  return tonumber(redis.call('HGET', cmeta, field) or '0')
end

local function decode_member(id)
  local raw = redis.call('HGET', cmember, id)
  if raw then return cjson.decode(raw) end
  return nil
end

local function store_member_state(id, m)
  redis.call('HSET', cmember, id, cjson.encode(m))
end

-- Partition sets: {['topic:p'] = true} (topic names never contain ':').
local function to_set(map)
  local set = {}
  for topic, partitions in pairs(map or {}) do
    for _, p in ipairs(partitions) do set[topic .. ':' .. string.format('%d', p)] = true end
  end
  return set
end

local function from_set(set)
  local map = {}
  for k in pairs(set) do
    local topic, p = string.match(k, '^(.*):(%d+)$')
    map[topic] = map[topic] or {}
    table.insert(map[topic], tonumber(p))
  end
  for _, partitions in pairs(map) do table.sort(partitions) end
  return map
end

local function minus(a, b)
  local out = {}
  for k in pairs(a) do if not b[k] then out[k] = true end end
  return out
end

local function is_empty(set)
  return next(set) == nil
end

-- One text per set, whatever order the table holds it in (to tell a change).
local function canonical(set)
  local list = {}
  for k in pairs(set) do list[#list + 1] = k end
  table.sort(list)
  return table.concat(list, ',')
end

local function bump_epoch()
  redis.call('HINCRBY', cmeta, 'group_epoch', 1)
end

-- A member's keys gone (its session, state and target), nothing else.
local function forget_consumer(id)
  redis.call('HDEL', cmembers, id)
  redis.call('HDEL', cmember, id)
  redis.call('HDEL', ctarget, id)
end

local function remove_consumer(id)
  forget_consumer(id)
  bump_epoch()
  bump_fence(cmeta) -- its partitions may go to others now
end

-- Members whose session ran out leave (a new group epoch).
local function settle_consumers()
  local flat = redis.call('HGETALL', cmembers)
  for i = 1, #flat, 2 do
    if now > tonumber(flat[i + 1]) then remove_consumer(flat[i]) end
  end
end

-- Partitions other members still hold (assigned, revoked or not yet confirmed).
local function held_by_others(id)
  local held = {}
  local flat = redis.call('HGETALL', cmember)
  for i = 1, #flat, 2 do
    if flat[i] ~= id then
      for k in pairs(to_set(cjson.decode(flat[i + 1]).assigned)) do held[k] = true end
    end
  end
  return held
end

-- The data the assignor needs when the target is behind the group epoch, else nil.
local function target_request()
  local group_epoch = cnum('group_epoch')
  if group_epoch <= cnum('target_epoch') then return nil end
  local members_data, previous = {}, {}
  local flat = redis.call('HGETALL', cmember)
  for i = 1, #flat, 2 do
    local m = cjson.decode(flat[i + 1])
    members_data[flat[i]] = {subscribed = m.subscribed, assignor = m.assignor}
    local t = redis.call('HGET', ctarget, flat[i])
    if t then previous[flat[i]] = cjson.decode(t) end
  end
  local counts = {}
  local cflat = redis.call('HGETALL', ctopics)
  for i = 1, #cflat, 2 do counts[cflat[i]] = tonumber(cflat[i + 1]) end
  return {K.NEED_TARGET, group_epoch, cjson.encode(members_data), cjson.encode(previous),
    cjson.encode(counts)}
end

-- Move member `id` toward its target and answer it:
-- {0, member id, member epoch, assignment JSON ('' when unchanged since last sent)}.
-- `owned`: the partitions the member says it owns (nil: not in this request).
local function reconcile(id, owned, full)
  local m = decode_member(id)
  local target_epoch = cnum('target_epoch')
  local target = to_set(cjson.decode(redis.call('HGET', ctarget, id) or '{}'))
  local assigned, revoking = to_set(m.assigned), to_set(m.revoking)
  local owned_set = owned and to_set(owned) or nil
  local function released(set)
    if not owned_set then return false end
    for k in pairs(set) do if owned_set[k] then return false end end
    return true
  end
  if not is_empty(revoking) and released(revoking) then
    assigned, revoking = minus(assigned, revoking), {}
  end
  if m.epoch < target_epoch and is_empty(revoking) then
    local revoke = minus(assigned, target)
    if is_empty(revoke) then
      m.previous_epoch, m.epoch = m.epoch, target_epoch
      bump_fence(cmeta) -- its commits at the old epoch are stale from now on
    elseif released(revoke) then
      assigned = minus(assigned, revoke)
      m.previous_epoch, m.epoch = m.epoch, target_epoch
      bump_fence(cmeta)
    else
      revoking = revoke
    end
  end
  if m.epoch == target_epoch and is_empty(revoking) then
    local others = held_by_others(id)
    for k in pairs(target) do
      if not assigned[k] and not others[k] then assigned[k] = true end
    end
  end
  -- a member that does not give partitions up within its rebalance timeout is fenced (it
  -- would hold them from the others forever), as in Kafka
  if is_empty(revoking) then
    m.revoke_deadline = 0
  elseif (m.revoke_deadline or 0) == 0 then
    m.revoke_deadline = now + (m.rebalance_timeout_ms or 300000)
  elseif now > m.revoke_deadline then
    remove_consumer(id)
    return {K.FENCED_MEMBER_EPOCH}
  end
  local visible = minus(assigned, revoking)
  local text = canonical(visible)
  local send = full or text ~= m.sent
  m.assigned, m.revoking, m.sent = from_set(assigned), from_set(revoking), text
  store_member_state(id, m)
  local assignment = ''
  if send then assignment = cjson.encode(from_set(visible)) end
  return {K.NONE, id, m.epoch, assignment}
end
