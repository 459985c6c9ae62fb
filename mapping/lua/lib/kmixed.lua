--! include lib/kconsumer.lua
-- Shared by the classic scripts and kafka_group/consumer_heartbeat: a consumer group (KIP-848)
-- with members that speak the classic protocol, Kafka's online migration. A consumer's
-- first ConsumerGroupHeartbeat to a Stable classic group whose protocol type is "consumer"
-- turns it into a consumer group (upgrade_classic): each classic member becomes a member of
-- consumer:member at its generation as member epoch, with the partitions of its last
-- assignment, its subscription read from its JoinGroup metadata, and `classic` =
-- {session_timeout_ms, protocols = [names], version} (what its SyncGroup answer needs). From
-- then on, while the group has live members, classic requests are served against it as
-- Kafka's coordinator serves them: a JoinGroup is a heartbeat of the member (the pod calls
-- kafka_group/consumer_heartbeat with the classic fields) answered at once with its member
-- epoch as the generation and no leader; a SyncGroup gets the member's partitions; a
-- Heartbeat answers REBALANCE_IN_PROGRESS while the member is behind the group epoch, has
-- partitions to give up, or may now take partitions others released; a LeaveGroup removes
-- the member. A rolling restart from one protocol to the other thus never stops the group.
-- When the last member of the consumer protocol is gone, the classic members are dropped
-- and form a classic group again (downgrade_if_classic_only).

-- Kafka's embedded consumer protocol, never flexible: a string is int16 length + bytes.
local function read_string(bytes, pos)
  local length
  length, pos = struct.unpack('>h', bytes, pos)
  local text = string.sub(bytes, pos, pos + length - 1)
  if length < 0 or #text ~= length then error('short string') end
  return text, pos + length
end

-- read(pos, count) past the int16 version and the int32 count every version of both
-- messages starts with; nil when `bytes` is malformed.
local function decoded(bytes, read)
  local ok, result = pcall(function()
    local count, pos = struct.unpack('>i', bytes, 3)
    return read(pos, count)
  end)
  if ok then return result end
  return nil
end

-- ConsumerProtocolSubscription's topics, nil when malformed.
local function subscribed_topics_of(bytes)
  return decoded(bytes, function(pos, count)
    local list = {}
    for _ = 1, count do
      list[#list + 1], pos = read_string(bytes, pos)
    end
    table.sort(list)
    return list
  end)
end

-- ConsumerProtocolAssignment's partitions {topic = [p]} ('' : none), nil when malformed.
local function assigned_partitions_of(bytes)
  if bytes == '' then return {} end
  return decoded(bytes, function(pos, count)
    local map = {}
    for _ = 1, count do
      local topic, n
      topic, pos = read_string(bytes, pos)
      n, pos = struct.unpack('>i', bytes, pos)
      local partitions = {}
      for _ = 1, n do partitions[#partitions + 1], pos = struct.unpack('>i', bytes, pos) end
      if #partitions > 0 then map[topic] = partitions end
    end
    return map
  end)
end

-- The classic group becomes a consumer group; nil, or the error code that refuses the
-- joining consumer (the classic group is left as it was).
local function upgrade_classic()
  if redis.call('HGET', meta, 'protocol_type') ~= 'consumer' then
    return K.INCONSISTENT_GROUP_PROTOCOL -- (a Connect group, say: no consumer subscriptions)
  end
  -- a rebalance in flight would have its JoinGroups and SyncGroups answered by nobody: the
  -- consumer retries this answer (as while a coordinator loads) until the group is Stable
  if state() ~= 'Stable' then return K.COORDINATOR_LOAD_IN_PROGRESS end
  local gen, selected = generation(), redis.call('HGET', meta, 'protocol')
  local converted = {}
  for _, id in ipairs(redis.call('HKEYS', members)) do
    local names, by_name = member_protocols(id)
    local metadata = by_name[selected] or by_name[names[1]] or ''
    local topics = subscribed_topics_of(metadata)
    local assigned = assigned_partitions_of(redis.call('HGET', assignment, id) or '')
    if not topics or not assigned then return K.INCONSISTENT_GROUP_PROTOCOL end
    local i = member_info(id) or {}
    local version = 0
    if #metadata >= 2 then version = struct.unpack('>h', metadata, 1) end
    converted[id] = {
      state = {epoch = gen, previous_epoch = gen, assigned = assigned, revoking = {},
        sent = canonical(to_set(assigned)), subscribed = topics, assignor = '',
        instance_id = (i.instance_id ~= '' and i.instance_id) or nil,
        client_id = i.client_id or '', client_host = i.client_host or '',
        rebalance_timeout_ms = i.rebalance_timeout_ms,
        classic = {session_timeout_ms = i.session_timeout_ms, protocols = names,
          version = version}},
      expiry = redis.call('HGET', members, id)}
  end
  -- the commit fence goes on from the larger of the two (current_fence), before meta goes
  redis.call('HSET', cmeta, 'commit_fence', fmt(current_fence()))
  bump_fence(cmeta)
  redis.call('DEL', meta, members, info, protocols, joining, generation_of, assignment, static,
    pending_ids)
  redis.call('DEL', cmembers, cmember, ctarget)
  for id, c in pairs(converted) do
    store_member_state(id, c.state)
    redis.call('HSET', cmembers, id, c.expiry)
    redis.call('HSET', ctarget, id, cjson.encode(c.state.assigned))
  end
  redis.call('HSET', cmeta, 'group_epoch', gen, 'target_epoch', gen)
  publish('upgraded ' .. gen)
  return nil
end

-- Once no member of the consumer protocol is left (the last one left, expired or was
-- fenced), the classic members go too: their next request gets UNKNOWN_MEMBER_ID and they
-- join again as a classic group, the rebalance that Kafka's conversion back to a classic
-- group starts. True when it happened (or the group has no classic member either).
local function downgrade_if_classic_only()
  local classic_ids = {}
  local states = redis.call('HGETALL', cmember)
  for i = 1, #states, 2 do
    if not cjson.decode(states[i + 1]).classic then return false end
    classic_ids[#classic_ids + 1] = states[i]
  end
  if #classic_ids == 0 then return true end
  for _, id in ipairs(classic_ids) do forget_consumer(id) end
  bump_epoch()
  bump_fence(cmeta)
  publish('downgraded')
  return true
end

-- The classic member `member_id` (or the holder of `instance_id`) of the consumer group:
-- its state, or nil and the error code (nil, nil: the group has no such member here).
local function classic_member(member_id, instance_id)
  settle_consumers()
  if downgrade_if_classic_only() then return nil, nil end
  local m = decode_member(member_id)
  if m and m.classic then
    if instance_id ~= '' and m.instance_id ~= instance_id then
      return nil, K.FENCED_INSTANCE_ID
    end
    return m, nil
  end
  if instance_id ~= '' then
    local states = redis.call('HGETALL', cmember)
    for i = 1, #states, 2 do
      if cjson.decode(states[i + 1]).instance_id == instance_id then
        return nil, K.FENCED_INSTANCE_ID -- (another member id holds it now)
      end
    end
  end
  return nil, nil
end

-- Whether the member must join again: the group moved on, it has partitions to give up,
-- or partitions of its target that others held are free now (Kafka's classic heartbeat
-- to a consumer group).
local function must_rejoin(id, m)
  if m.epoch < cnum('group_epoch') or next(m.revoking or {}) ~= nil then return true end
  local target = to_set(cjson.decode(redis.call('HGET', ctarget, id) or '{}'))
  local pending = minus(target, to_set(m.assigned))
  if is_empty(pending) then return false end
  local others = held_by_others(id)
  for k in pairs(pending) do if not others[k] then return true end end
  return false
end

-- Heartbeat of a classic member of the consumer group: {error code}, or nil when the
-- group has no such member (the classic script goes on). A member told to rejoin that does
-- not within its rebalance timeout is removed, as Kafka's join timeout does.
local function classic_heartbeat(member_id, instance_id, gen)
  local m, refusal = classic_member(member_id, instance_id)
  if refusal then return {refusal} end
  if not m then return nil end
  if gen ~= m.epoch then return {K.ILLEGAL_GENERATION} end
  redis.call('HSET', cmembers, member_id, fmt(now + m.classic.session_timeout_ms))
  if not must_rejoin(member_id, m) then
    if (m.rejoin_deadline or 0) ~= 0 then
      m.rejoin_deadline = 0
      store_member_state(member_id, m)
    end
    return {K.NONE}
  end
  if (m.rejoin_deadline or 0) == 0 then
    m.rejoin_deadline = now + (m.rebalance_timeout_ms or 300000)
    store_member_state(member_id, m)
  elseif now > m.rejoin_deadline then
    remove_consumer(member_id)
    publish('consumer-left')
    return {K.UNKNOWN_MEMBER_ID}
  end
  return {K.REBALANCE_IN_PROGRESS}
end

-- SyncGroup of a classic member of the consumer group: {K.CONSUMER_GROUP, partitions JSON,
-- protocol name, subscription version} (the pod encodes the assignment), {error code}, or
-- nil when the group has no such member.
local function classic_sync(member_id, instance_id, gen, protocol_type, protocol_name)
  local m, refusal = classic_member(member_id, instance_id)
  if refusal then return {refusal} end
  if not m then return nil end
  if gen ~= m.epoch then return {K.ILLEGAL_GENERATION} end
  local name = m.classic.protocols[1] or ''
  if (protocol_type ~= '' and protocol_type ~= 'consumer')
      or (protocol_name ~= '' and protocol_name ~= name) then
    return {K.INCONSISTENT_GROUP_PROTOCOL}
  end
  -- behind the group epoch: rejoin first, unless it is giving partitions up (then the
  -- rejoin that follows its revocation catches up)
  if cnum('group_epoch') > m.epoch and next(m.revoking or {}) == nil then
    return {K.REBALANCE_IN_PROGRESS}
  end
  redis.call('HSET', cmembers, member_id, fmt(now + m.classic.session_timeout_ms))
  local visible = from_set(minus(to_set(m.assigned), to_set(m.revoking)))
  return {K.CONSUMER_GROUP, cjson.encode(visible), name, m.classic.version or 0}
end

-- LeaveGroup of a classic member of the consumer group (named by member id or instance
-- id): its error code, or nil when the group has no such member.
local function classic_leave(member_id, instance_id)
  settle_consumers()
  if downgrade_if_classic_only() then return nil end
  local states = redis.call('HGETALL', cmember)
  for i = 1, #states, 2 do
    local m = cjson.decode(states[i + 1])
    if m.classic and ((instance_id ~= '' and m.instance_id == instance_id)
        or (instance_id == '' and states[i] == member_id)) then
      if member_id ~= '' and states[i] ~= member_id then return K.FENCED_INSTANCE_ID end
      remove_consumer(states[i])
      publish('consumer-left')
      return K.NONE
    end
  end
  return nil
end
