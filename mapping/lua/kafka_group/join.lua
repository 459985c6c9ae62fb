--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: initial_delay_ms, member_id, instance_id, client_id, client_host,
--   session_timeout_ms, rebalance_timeout_ms, protocol_type, require_known_id, new_member_id,
--   protocol1, metadata1, ...
-- JoinGroup (Kafka's GroupCoordinator.handleJoinGroup, classic protocol).
-- ARGV[1] initial rebalance delay (ms), ARGV[2] member id ('' for a new member),
-- ARGV[3] group.instance.id ('' for none), ARGV[4] client id, ARGV[5] client host,
-- ARGV[6] session timeout (ms), ARGV[7] rebalance timeout (ms), ARGV[8] protocol type,
-- ARGV[9] '1' when the client wants MEMBER_ID_REQUIRED (JoinGroup v4+),
-- ARGV[10] the member id to hand out if one is needed (made by the caller),
-- ARGV[11..] protocol name, metadata, name, metadata, ... (the member's preference order).
-- Returns join_answer (see lib/kgroup.lua), {WAIT, ms} while the barrier is open (the caller
-- waits and runs kafka_group/join_wait), {MEMBER_ID_REQUIRED, new id}, {CONSUMER_GROUP} when
-- the group is a consumer group (KIP-848) with live members (the caller joins the member to
-- it: lib/kmixed.lua), or {error code}.
local delay_ms, member_id, instance_id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local client_id, client_host = ARGV[4], ARGV[5]
local session_timeout, rebalance_timeout = tonumber(ARGV[6]), tonumber(ARGV[7])
local protocol_type, require_known, new_id = ARGV[8], ARGV[9] == '1', ARGV[10]
local offered = {}
for i = 11, #ARGV, 2 do offered[#offered + 1] = ARGV[i] end

settle()

-- The group's members (other than this one) must all support one of the offered protocols.
local function compatible(self_id)
  local others, counts = 0, {}
  for _, id in ipairs(redis.call('HKEYS', members)) do
    if id ~= self_id then
      others = others + 1
      for _, name in ipairs((member_protocols(id))) do counts[name] = (counts[name] or 0) + 1 end
    end
  end
  if others == 0 then return true end
  if redis.call('HGET', meta, 'protocol_type') ~= protocol_type then return false end
  for _, name in ipairs(offered) do
    if counts[name] == others then return true end
  end
  return false
end

local function store_member(id)
  redis.call('HSET', info, id, cjson.encode({
    instance_id = instance_id, client_id = client_id, client_host = client_host,
    session_timeout_ms = session_timeout, rebalance_timeout_ms = rebalance_timeout}))
  local flat = {}
  for i = 11, #ARGV do flat[#flat + 1] = ARGV[i] end
  redis.call('HSET', protocols, id, cmsgpack.pack(flat))
  redis.call('HSET', members, id, fmt(now + session_timeout))
end

local function same_protocols(id)
  local flat = {}
  for i = 11, #ARGV do flat[#flat + 1] = ARGV[i] end
  return redis.call('HGET', protocols, id) == cmsgpack.pack(flat)
end

local function mark_joining(id)
  redis.call('HSET', joining, id, redis.call('HINCRBY', meta, 'join_seq', 1))
end

-- The member waits in the barrier, or has its answer already when this join completed it.
local function after_join(id)
  local until_ms = maybe_complete_join()
  if redis.call('HEXISTS', joining, id) == 1 then return wait_reply(until_ms) end
  return join_answer(id, false)
end

local function add_member(id)
  local was = state()
  store_member(id)
  mark_joining(id)
  redis.call('HSET', meta, 'protocol_type', protocol_type)
  if was == 'Empty' then
    prepare_rebalance(delay_ms)
  elseif was == 'PreparingRebalance' then
    extend_initial_delay(delay_ms)
  else
    prepare_rebalance(0)
  end
  return after_join(id)
end

local function update_and_rebalance(id)
  store_member(id)
  mark_joining(id)
  prepare_rebalance(0)
  return after_join(id)
end

-- A static member back under a new member id: the old id is fenced, its place (and, in a
-- Stable group whose protocol does not change, its assignment) goes to the new id.
local function replace_static(old_id)
  local id = new_id
  bump_fence(meta) -- the old id's commits in flight must not land after the new id's
  for _, key in ipairs({members, info, protocols, joining, generation_of, assignment}) do
    local v = redis.call('HGET', key, old_id)
    if v then
      redis.call('HSET', key, id, v)
      redis.call('HDEL', key, old_id)
    end
  end
  redis.call('HSET', static, instance_id, id)
  if redis.call('HGET', meta, 'leader') == old_id then redis.call('HSET', meta, 'leader', id) end
  store_member(id)
  local current = state()
  if current == 'Stable' then
    local ids = redis.call('HKEYS', members)
    local protocol = select_protocol(ids, redis.call('HGET', meta, 'leader'))
    if protocol == redis.call('HGET', meta, 'protocol') then
      publish('replaced ' .. id)
      return join_answer(id, redis.call('HGET', meta, 'leader') == id)
    end
    return update_and_rebalance(id)
  elseif current == 'CompletingRebalance' then
    -- the leader may be assigning to the old id: a new round gives the new id its share
    return update_and_rebalance(id)
  end
  mark_joining(id) -- PreparingRebalance
  return after_join(id)
end

if consumer_members_live() > 0 then
  if protocol_type == 'consumer' then return {K.CONSUMER_GROUP} end
  return {K.INCONSISTENT_GROUP_PROTOCOL}
end
if not compatible(member_id) then return {K.INCONSISTENT_GROUP_PROTOCOL} end

if member_id == '' then
  if instance_id ~= '' then
    local old_id = redis.call('HGET', static, instance_id)
    if old_id then return replace_static(old_id) end
    redis.call('HSET', static, instance_id, new_id)
    return add_member(new_id)
  end
  if require_known then
    redis.call('HSET', pending_ids, new_id, fmt(now + session_timeout))
    return {K.MEMBER_ID_REQUIRED, new_id}
  end
  return add_member(new_id)
end

if redis.call('HEXISTS', pending_ids, member_id) == 1 then
  redis.call('HDEL', pending_ids, member_id)
  if instance_id ~= '' then redis.call('HSET', static, instance_id, member_id) end
  return add_member(member_id)
end
if fenced(member_id, instance_id) then return {K.FENCED_INSTANCE_ID} end
if redis.call('HEXISTS', members, member_id) == 0 then return {K.UNKNOWN_MEMBER_ID} end

local current = state()
if current == 'PreparingRebalance' then
  store_member(member_id)
  mark_joining(member_id)
  return after_join(member_id)
elseif current == 'CompletingRebalance' then
  -- the member missed the answer of this generation: the same one again
  if same_protocols(member_id) then
    touch(member_id)
    return join_answer(member_id, false)
  end
  return update_and_rebalance(member_id)
end
-- Stable: the leader rejoining or changed metadata starts a rebalance, else nothing changes
if redis.call('HGET', meta, 'leader') == member_id or not same_protocols(member_id) then
  return update_and_rebalance(member_id)
end
touch(member_id)
return join_answer(member_id, false)
