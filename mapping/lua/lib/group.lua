--! include lib/clock.lua
-- Shared by the group scripts: one (group, topic) is four hashes under one hash tag.
--   KEYS[1] meta        generation, assignor, partitions, active_ms (the last heartbeat of
--                       a member that left or expired, or the last Spark commit: offsets
--                       retention counts from the later of it and the members' heartbeats)
--   KEYS[2] members     consumer id -> last heartbeat (ms, Redis clock)
--   KEYS[3] assignment  consumer id -> its partitions, "0 3 6" ("" when none)
--   KEYS[4] offsets     partition -> committed offset (the next one to read)
--   KEYS[5] offset_metadata  Kafka commit metadata and leader epochs (the scripts that
--                       change or delete offsets: commit, delete, expire)
-- ARGV[1] = session timeout (ms), ARGV[2] = the topic's partition count; each script's own
-- arguments follow from ARGV[3] (mapping/group/groups.py GroupHead builds that head).  The clock is
-- Redis's (TIME), so pods need no common clock.
local meta, members, assignment, offsets = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local session_timeout_ms = tonumber(ARGV[1])
local partition_count = tonumber(ARGV[2])


local function mismatch(message)
  return redis.error_reply(K.V1_GENERATION_MISMATCH .. ' ' .. message)
end

-- The assignors (mapping/group/assignors.py is their specification): member id -> partition list.
local function assign(assignor, ids)
  local lists, n = {}, #ids
  for i = 1, n do lists[ids[i]] = {} end
  if n == 0 then return lists end
  if assignor == 'range' then
    local base, extra = math.floor(partition_count / n), partition_count % n
    local p = 0
    for i = 1, n do
      local count = base
      if i <= extra then count = count + 1 end
      for _ = 1, count do
        table.insert(lists[ids[i]], p)
        p = p + 1
      end
    end
  else
    for p = 0, partition_count - 1 do
      table.insert(lists[ids[(p % n) + 1]], p)
    end
  end
  return lists
end

-- Store a new generation: its number, assignor, and every current member's partitions.
local function rebalance(generation, assignor)
  local ids = redis.call('HKEYS', members)
  table.sort(ids)
  local lists = assign(assignor, ids)
  redis.call('DEL', assignment)
  for _, id in ipairs(ids) do
    redis.call('HSET', assignment, id, table.concat(lists[id], ' '))
  end
  redis.call('HSET', meta, 'generation', generation, 'assignor', assignor,
    'partitions', partition_count)
end

-- The group as it stands now: members whose session ran out are removed first (one new
-- generation for all of them).  Returns nil when the group never existed, else
-- {generation = n, assignor = name}.
local function load_group(now)
  local m = redis.call('HMGET', meta, 'generation', 'assignor', 'partitions')
  local generation = tonumber(m[1])
  if not generation then return nil end
  -- The topic got more partitions (mapping/admin.py add_partitions): a new generation
  -- assigns them, as Kafka rebalances when a subscribed topic grows. (A pod still holding
  -- the old count never shrinks an assignment: only a larger count counts.)
  local grown = partition_count > (tonumber(m[3]) or partition_count)
  local flat = redis.call('HGETALL', members)
  local expired = {}
  local last_seen = 0
  for i = 1, #flat, 2 do
    local heartbeat = tonumber(flat[i + 1])
    if now - heartbeat > session_timeout_ms then
      expired[#expired + 1] = flat[i]
      if heartbeat > last_seen then last_seen = heartbeat end
    end
  end
  if #expired > 0 or grown then
    for _, id in ipairs(expired) do redis.call('HDEL', members, id) end
    if last_seen > (tonumber(redis.call('HGET', meta, 'active_ms')) or 0) then
      redis.call('HSET', meta, 'active_ms', fmt(last_seen))
    end
    generation = generation + 1
    rebalance(generation, m[2])
  end
  return {generation = generation, assignor = m[2]}
end

-- nil when `member` is in the group at `generation` (a decimal string), else the
-- GENERATION_MISMATCH reply to return.
local function check_member(group, member, generation)
  if not group then return mismatch('group not found') end
  if redis.call('HEXISTS', members, member) == 0 then return mismatch('unknown member') end
  if tonumber(generation) ~= group.generation then return mismatch('stale generation') end
  return nil
end
