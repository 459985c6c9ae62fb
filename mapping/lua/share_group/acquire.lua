-- KEYS: log, state, txn_aborted
-- ARGV: consumer_group, member_id, lock_ms, max_records, delivery_limit, start_id,
--   sequence_bits, read_committed, max_bytes, first
-- ShareFetch's acquisition on one share-partition, which rides on the Redis consumer group
-- ARGV[1] of the partition's log stream (created at ARGV[6], '$' latest or '0' earliest,
-- when missing, with the stream itself when nobody wrote to the partition yet).  First the records whose lock expired (or that were released: their idle
-- time is set past the lock) are claimed by XAUTOCLAIM, which counts one more delivery;
-- those past the delivery limit ARGV[5] are archived (XACK) instead.  Then new records are
-- read by XREADGROUP, never past the high watermark (the state's hw: the last offset
-- readers may see) and, with read_committed (ARGV[8] = '1'), never at or past the first
-- offset of the oldest open transaction (the state's txn_first: the last stable offset), so
-- the records of an open transaction wait for its marker.  Transaction markers are never
-- handed out, nor, with read_committed, the records of aborted transactions (txn_aborted:
-- "<producer id> <first offset>" -> the abort marker's offset): both are archived on sight.
-- At most ARGV[4] records, and new records only while their fields' bytes stay within
-- ARGV[9] (-1: no bound; Kafka's MaxBytes, a soft bound: with ARGV[10] = '1', nothing is
-- in the answer yet, so the first record is taken whatever its size).
-- Returns {{entry id, delivery count, fields}, ...}, in no particular order.
local log, state, txn_aborted = KEYS[1], KEYS[2], KEYS[3]
local cgroup, member = ARGV[1], ARGV[2]
local lock_ms, max_records, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local scale = 2 ^ tonumber(ARGV[7])
local read_committed = ARGV[8] == '1'
local max_bytes, first = tonumber(ARGV[9]), ARGV[10] == '1'

-- MKSTREAM: a partition nobody wrote yet has no log stream, and its share-partition starts
-- now all the same (at the empty log's start, as Kafka's at log end offset 0): a record
-- written after this first fetch is the group's, whatever the start (latest or earliest)
redis.pcall('XGROUP', 'CREATE', log, cgroup, ARGV[6], 'MKSTREAM')

local function offset_of(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) * scale + tonumber(seq)
end

-- The aborted transactions' ranges per producer, read once, at the first transactional
-- record met (entries come in offset order: aborts whose marker is before it are behind).
local aborted = nil
local function is_aborted(producer, offset)
  if aborted == nil then
    aborted = {}
    local found = redis.call('ZRANGEBYSCORE', txn_aborted, offset, '+inf', 'WITHSCORES')
    for i = 1, #found, 2 do
      local pid, first = string.match(found[i], '^(%S+) (%S+)$')
      local ranges = aborted[pid] or {}
      ranges[#ranges + 1] = {tonumber(first), tonumber(found[i + 1])}
      aborted[pid] = ranges
    end
  end
  for _, r in ipairs(aborted[producer] or {}) do
    if r[1] <= offset and offset <= r[2] then return true end
  end
  return false
end

-- A transactional record's producer id (its 'pid' field, among the last ones), or nil.
local function producer_of(fields)
  for i = #fields - 1, math.max(1, #fields - 7), -2 do
    if fields[i] == 'pid' then return fields[i + 1] end
  end
  return nil
end

-- Whether an entry is never handed out: a marker, or (read_committed) an aborted record.
local function archived(id, fields)
  if fields[1] == 'ctl' then return true end
  if read_committed then
    local producer = producer_of(fields)
    if producer then return is_aborted(producer, offset_of(id)) end
  end
  return false
end

local function size_of(fields)
  local bytes = 0
  for _, f in ipairs(fields) do bytes = bytes + #f end
  return bytes
end

local out, taken_bytes = {}, 0
local function take(id, count, fields)
  if archived(id, fields) then
    redis.call('XACK', log, cgroup, id)
  else
    out[#out + 1] = {id, count, fields}
    taken_bytes = taken_bytes + size_of(fields)
  end
end
local function full()
  return #out >= max_records or (max_bytes >= 0 and taken_bytes >= max_bytes)
end

-- 1. expired locks and released records
local cursor, rounds = '0-0', 0
repeat
  local claimed = redis.call('XAUTOCLAIM', log, cgroup, member, lock_ms, cursor,
    'COUNT', max_records - #out)
  cursor = claimed[1]
  for _, e in ipairs(claimed[2]) do
    local pending = redis.call('XPENDING', log, cgroup, e[1], e[1], 1)
    local count = pending[1] and tonumber(pending[1][4]) or 1
    if count > limit then
      redis.call('XACK', log, cgroup, e[1]) -- archived: delivered too often
    else
      take(e[1], count, e[2])
    end
  end
  rounds = rounds + 1
until cursor == '0-0' or full() or rounds >= 10

-- 2. new records, below the high watermark (read_committed: below the last stable offset)
if not full() then
  local bound = tonumber(redis.call('HGET', state, 'hw') or '')
  if read_committed then
    local open_first = tonumber(redis.call('HGET', state, 'txn_first') or '')
    if open_first and (bound == nil or open_first - 1 < bound) then bound = open_first - 1 end
  end
  local last = nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', log)) do
    local name, delivered = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
    end
    if name == cgroup then last = delivered end
  end
  -- markers and aborted records taken on the way do not count: read on (a few rounds)
  local reads = 0
  while last and not full() and reads < 10 do
    local want = max_records - #out
    local ahead = redis.call('XRANGE', log, '(' .. last, '+', 'COUNT', want)
    local n, bytes, bounded = 0, taken_bytes, false
    for _, e in ipairs(ahead) do
      if bound and offset_of(e[1]) > bound then break end
      if max_bytes >= 0 then
        bytes = bytes + size_of(e[2])
        local anything = #out + n > 0 or not first
        if bytes > max_bytes and anything then
          bounded = true
          break
        end
      end
      n = n + 1
    end
    if n == 0 then break end
    local read = redis.call('XREADGROUP', 'GROUP', cgroup, member, 'COUNT', n,
      'STREAMS', log, '>')
    if not (read and read[1]) then break end
    for _, e in ipairs(read[1][2]) do
      take(e[1], 1, e[2])
      last = e[1]
    end
    reads = reads + 1
    if n < want or bounded then break end -- the bound, the bytes or the log's end
  end
end
return out
