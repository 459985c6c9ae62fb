--! include lib/clock.lua
-- Shared by the kafka_group/* scripts: one Kafka classic group, every key under the hash tag
-- {<group>} (see mapping/core/keys.py KafkaGroupKeys and mapping/kafka_group/):
--   KEYS[1] meta           state, generation, protocol_type, protocol, leader,
--                          rebalance_deadline, delay_until (ms, Redis clock), join_seq,
--                          commit_fence (see current_fence below)
--   KEYS[2] members        member id -> session expiry (ms)
--   KEYS[3] member_info    member id -> JSON {instance_id, client_id, client_host,
--                          session_timeout_ms, rebalance_timeout_ms}
--   KEYS[4] protocols      member id -> msgpack array {name1, metadata1, name2, ...}
--   KEYS[5] joining        member id -> join order, while its JoinGroup waits for the barrier
--   KEYS[6] generation_of  member id -> the generation whose join it was answered with
--   KEYS[7] assignment     member id -> assignment bytes (from the leader's SyncGroup)
--   KEYS[8] static         group.instance.id -> member id
--   KEYS[9] pending_ids    member id handed out with MEMBER_ID_REQUIRED -> expiry (ms)
--   KEYS[10] events        pub/sub channel: every state change is published (waiters re-check)
--   KEYS[11..15] the same group under the KIP-848 consumer protocol (see lib/kconsumer.lua):
--   consumer:meta, consumer:members, consumer:member, consumer:target, consumer:topics
-- States (Kafka's names): Empty -> PreparingRebalance -> CompletingRebalance -> Stable; a
-- deleted group has no keys (Dead).  Time is Redis's TIME only: whichever script touches the
-- group first expires members whose session ran out and completes a join barrier whose
-- deadline passed, so no pod keeps timers that matter for correctness.
local meta, members, info, protocols = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local joining, generation_of, assignment, static = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local pending_ids, events = KEYS[9], KEYS[10]
local cmeta, cmembers, cmember, ctarget, ctopics = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local now = now_ms()

-- Members of the group under the KIP-848 protocol whose session is still running: while
-- there are any, classic requests are served as theirs (lib/kmixed.lua).
local function consumer_members_live()
  local live = 0
  for _, expiry in ipairs(redis.call('HVALS', cmembers)) do
    if tonumber(expiry) >= now then live = live + 1 end
  end
  return live
end

-- Kafka's error codes used here are K.<name> (mapping/core/kafka_errors.py holds them all).
-- K.WAIT is not an error: the caller waits (pub/sub or the returned ms) and re-checks.

local function state()
  return redis.call('HGET', meta, 'state') or 'Empty'
end

local function generation()
  return tonumber(redis.call('HGET', meta, 'generation') or '0')
end

local function publish(event)
  redis.call('PUBLISH', events, event)
end

-- Commit fencing (docs/kafka-groups-design.md, "Atomic commits"): the group's commit fence
-- grows whenever commits checked before may have turned stale with partitions going to
-- another member or incarnation (a new generation, a static member replaced, a KIP-848
-- member's epoch moving or the member leaving). A commit's check answers the fence as its
-- token; its write, at the (group, topic)'s slot, is refused where a newer token was used.
-- The fence is the larger of meta's and consumer:meta's field (classic, KIP-848): one order
-- across both protocols.
local function current_fence()
  return math.max(tonumber(redis.call('HGET', meta, 'commit_fence') or '0'),
    tonumber(redis.call('HGET', cmeta, 'commit_fence') or '0'))
end

-- Never below the clock: after DeleteGroups the fields restart from now, still above every
-- token handed out before (fences stored beside offsets outlive the group's state).
local function bump_fence(key)
  redis.call('HSET', key, 'commit_fence', fmt(math.max(current_fence() + 1, now)))
end

-- The token of a commit that passed its check now. A group without a fence yet (no Kafka
-- state: commits from outside group management only; or state from before fencing) takes
-- the clock, less 1 ms so that its first fence, never below the clock, is larger.
local function commit_token()
  local fence = current_fence()
  if fence == 0 then return now - 1 end
  return fence
end

local function member_info(id)
  local raw = redis.call('HGET', info, id)
  if raw then return cjson.decode(raw) end
  return nil
end

-- {name1, name2, ...} in the member's order of preference, and name -> metadata.
local function member_protocols(id)
  local raw = redis.call('HGET', protocols, id)
  local names, by_name = {}, {}
  if raw then
    local flat = cmsgpack.unpack(raw)
    for i = 1, #flat, 2 do
      names[#names + 1] = flat[i]
      by_name[flat[i]] = flat[i + 1]
    end
  end
  return names, by_name
end

-- A fresh session for a member: it is alive now.
local function touch(id)
  local i = member_info(id)
  if i then redis.call('HSET', members, id, fmt(now + i.session_timeout_ms)) end
end

local function remove_member(id)
  local i = member_info(id)
  for _, key in ipairs({members, info, protocols, joining, generation_of, assignment}) do
    redis.call('HDEL', key, id)
  end
  if i and i.instance_id ~= '' and redis.call('HGET', static, i.instance_id) == id then
    redis.call('HDEL', static, i.instance_id)
  end
  if redis.call('HGET', meta, 'leader') == id then redis.call('HDEL', meta, 'leader') end
end

local function max_rebalance_timeout()
  local longest = 0
  for _, raw in ipairs(redis.call('HVALS', info)) do
    local t = cjson.decode(raw).rebalance_timeout_ms
    if t > longest then longest = t end
  end
  return longest
end

-- Start a rebalance (from any state but PreparingRebalance). From Empty the barrier also
-- waits `delay_ms` (group.initial.rebalance.delay.ms) so members starting together form one
-- generation.  Waiting SyncGroup followers learn of it from the event and re-check.
local function prepare_rebalance(delay_ms)
  local current = state()
  if current == 'PreparingRebalance' then return end
  local timeout = max_rebalance_timeout()
  local deadline = now + timeout
  redis.call('HSET', meta, 'state', 'PreparingRebalance', 'rebalance_deadline', fmt(deadline))
  if current == 'Empty' and delay_ms > 0 then
    redis.call('HSET', meta, 'delay_until', fmt(now + math.min(delay_ms, timeout)))
  else
    redis.call('HDEL', meta, 'delay_until')
  end
  publish('rebalance')
end

-- A new member joining while the initial delay runs pushes it back (up to the deadline).
local function extend_initial_delay(delay_ms)
  local delay_until = tonumber(redis.call('HGET', meta, 'delay_until'))
  if delay_until and now < delay_until then
    local deadline = tonumber(redis.call('HGET', meta, 'rebalance_deadline'))
    redis.call('HSET', meta, 'delay_until', fmt(math.min(now + delay_ms, deadline)))
  end
end

-- Kafka's rule: among the protocols every member supports, each member votes for the first
-- of them in its own order; most votes wins (ties: the leader's order).
local function select_protocol(ids, leader)
  local counts, prefs = {}, {}
  for _, id in ipairs(ids) do
    local names = member_protocols(id)
    prefs[id] = names
    for _, name in ipairs(names) do counts[name] = (counts[name] or 0) + 1 end
  end
  local votes = {}
  for _, id in ipairs(ids) do
    for _, name in ipairs(prefs[id]) do
      if counts[name] == #ids then
        votes[name] = (votes[name] or 0) + 1
        break
      end
    end
  end
  local best, best_votes = nil, -1
  for _, name in ipairs(prefs[leader]) do
    if votes[name] and votes[name] > best_votes then best, best_votes = name, votes[name] end
  end
  return best
end

local function go_empty(gen)
  redis.call('HSET', meta, 'state', 'Empty', 'generation', gen)
  bump_fence(meta)
  redis.call('HDEL', meta, 'protocol', 'leader', 'rebalance_deadline', 'delay_until')
  redis.call('DEL', joining, assignment, generation_of)
end

-- The barrier is complete: every member still in the group is in the new generation.
local function complete_join()
  local gen = generation() + 1
  local ids = redis.call('HKEYS', members)
  if #ids == 0 then
    go_empty(gen)
    publish('joined ' .. gen)
    return
  end
  local leader = redis.call('HGET', meta, 'leader')
  if not leader or redis.call('HEXISTS', members, leader) == 0 then
    -- the member that joined first in this rebalance
    local flat, first = redis.call('HGETALL', joining), nil
    for i = 1, #flat, 2 do
      if not first or tonumber(flat[i + 1]) < first then first, leader = tonumber(flat[i + 1]), flat[i] end
    end
  end
  local protocol = select_protocol(ids, leader)
  redis.call('DEL', joining, assignment, generation_of)
  for _, id in ipairs(ids) do
    touch(id) -- the session restarts with the join answer, as in Kafka
    redis.call('HSET', generation_of, id, gen)
  end
  redis.call('HSET', meta, 'state', 'CompletingRebalance', 'generation', gen,
    'protocol', protocol or '', 'leader', leader)
  bump_fence(meta)
  redis.call('HDEL', meta, 'rebalance_deadline', 'delay_until')
  publish('joined ' .. gen)
end

-- Completes the join barrier when it can. Returns nil when no barrier is open or it just
-- completed, else the time (ms) it will next be worth checking again.
local function maybe_complete_join()
  if state() ~= 'PreparingRebalance' then return nil end
  local delay_until = tonumber(redis.call('HGET', meta, 'delay_until'))
  if delay_until and now < delay_until then return delay_until end
  local deadline = tonumber(redis.call('HGET', meta, 'rebalance_deadline'))
  local flat, absent, next_check = redis.call('HGETALL', members), {}, deadline
  for i = 1, #flat, 2 do
    if redis.call('HEXISTS', joining, flat[i]) == 0 then
      absent[#absent + 1] = flat[i]
      next_check = math.min(next_check, tonumber(flat[i + 1]) + 1)
    end
  end
  if #absent > 0 then
    if now < deadline then return next_check end
    for _, id in ipairs(absent) do remove_member(id) end -- the rebalance timeout passed
  end
  complete_join()
  return nil
end

-- Members whose session ran out leave (members waiting in JoinGroup do not expire: the
-- rebalance deadline bounds them), then whatever that decides happens.
local function expire_members()
  local flat, removed = redis.call('HGETALL', members), false
  for i = 1, #flat, 2 do
    if now > tonumber(flat[i + 1]) and redis.call('HEXISTS', joining, flat[i]) == 0 then
      remove_member(flat[i])
      removed = true
    end
  end
  flat = redis.call('HGETALL', pending_ids)
  for i = 1, #flat, 2 do
    if now > tonumber(flat[i + 1]) then redis.call('HDEL', pending_ids, flat[i]) end
  end
  return removed
end

-- After members left: a settled group rebalances (or becomes Empty when none is left).
local function after_removal()
  local current = state()
  if current == 'Stable' or current == 'CompletingRebalance' then
    if redis.call('HLEN', members) == 0 then
      go_empty(generation() + 1)
      publish('empty')
    else
      prepare_rebalance(0)
    end
  end
end

-- What every script does first: apply what time has decided since the last call.
local function settle()
  if expire_members() then after_removal() end
  return maybe_complete_join()
end

-- true when a request naming `instance_id` comes from a member id that no longer owns it.
local function fenced(member_id, instance_id)
  if instance_id == '' then return false end
  local owner = redis.call('HGET', static, instance_id)
  return owner ~= false and owner ~= member_id
end

-- The earliest session expiry of the group's members (a sync waiter's next check).
local function next_expiry(default)
  local earliest = default
  for _, v in ipairs(redis.call('HVALS', members)) do
    local t = tonumber(v) + 1
    if not earliest or t < earliest then earliest = t end
  end
  return earliest
end

local function wait_reply(until_ms)
  local ms = 1000
  if until_ms then ms = math.max(1, until_ms - now) end
  return {K.WAIT, ms}
end

-- JoinGroup's answer for `id` at the current generation; the leader also gets every member
-- of the generation with its metadata for the chosen protocol.
-- {0, member id, generation, protocol type, protocol, leader, skip_assignment,
--  member1, instance1, metadata1, member2, ...}
local function join_answer(id, skip_assignment)
  local gen = generation()
  local m = redis.call('HMGET', meta, 'protocol_type', 'protocol', 'leader')
  local reply = {K.NONE, id, gen, m[1] or '', m[2] or '', m[3] or '', skip_assignment and 1 or 0}
  if m[3] == id then
    local flat = redis.call('HGETALL', generation_of)
    for i = 1, #flat, 2 do
      if tonumber(flat[i + 1]) == gen then
        local _, by_name = member_protocols(flat[i])
        local i_info = member_info(flat[i])
        reply[#reply + 1] = flat[i]
        reply[#reply + 1] = i_info and i_info.instance_id or ''
        reply[#reply + 1] = by_name[m[2]] or ''
      end
    end
  end
  return reply
end

-- Kafka's validateOffsetCommit (ClassicGroup's / ConsumerGroup's): nil when the member may
-- commit offsets now, else the error code; a member that may commit gets a fresh session.
-- `transactional` (TxnOffsetCommit) relaxes two rules as Kafka does: a request without
-- member id, instance id and generation (older producers send none) is allowed whatever the
-- group's state, and a classic group completing its rebalance does not refuse it; a KIP-848
-- member's stale epoch is ILLEGAL_GENERATION there (Kafka maps STALE_MEMBER_EPOCH so).
-- Call settle() first.
local function commit_refusal(member_id, instance_id, gen, transactional)
  -- a member of the group under the KIP-848 protocol: the generation is its member epoch
  local consumer = redis.call('HGET', cmember, member_id)
  if consumer then
    if now > tonumber(redis.call('HGET', cmembers, member_id) or '0') then
      return K.UNKNOWN_MEMBER_ID
    end
    local state = cjson.decode(consumer)
    if state.epoch ~= gen then
      -- (a classic member's generation is its epoch: classic clients know no other error)
      if transactional or state.classic then return K.ILLEGAL_GENERATION end
      return K.STALE_MEMBER_EPOCH
    end
    return nil
  end
  -- outside group management (generation -1, an admin tool's reset): only while the group
  -- has no member of either protocol, as Kafka's ConsumerGroup.validateOffsetCommit (a
  -- TxnOffsetCommit naming no member is let through, as there)
  if gen < 0 and consumer_members_live() > 0
      and not (transactional and member_id == '' and instance_id == '') then
    return K.UNKNOWN_MEMBER_ID
  end
  if redis.call('EXISTS', meta) == 0 then
    if gen < 0 then return nil end
    -- a KIP-848 group that does not know the member (gone, or expired): Kafka's answer
    if redis.call('EXISTS', cmeta) == 1 then return K.UNKNOWN_MEMBER_ID end
    return K.ILLEGAL_GENERATION
  end
  local current = state()
  if gen < 0 and current == 'Empty' then return nil end
  if transactional and gen < 0 and member_id == '' and instance_id == '' then return nil end
  if current == 'CompletingRebalance' and not transactional then
    return K.REBALANCE_IN_PROGRESS
  end
  if fenced(member_id, instance_id) then return K.FENCED_INSTANCE_ID end
  if redis.call('HEXISTS', members, member_id) == 0 then return K.UNKNOWN_MEMBER_ID end
  if gen ~= generation() then return K.ILLEGAL_GENERATION end
  touch(member_id)
  return nil
end
