--! include lib/partition.lua
-- Appending to a partition's leader log, shared by every script that writes one (V1
-- partition/produce.lua, the Kafka produce, the Spark sink), so every entry is written alike:
-- ids assigned here: ms = max(now, last ms), seq = last seq + 1 on the same ms, rolling to
-- the next ms when seq would reach 2^B, so offsets strictly increase and never collide (and
-- one call's offsets are consecutive: (ms << B | 2^B - 1) + 1 = (ms + 1) << B);
-- each entry numbered (field 'n': records ever appended, 1 for the first) so that counting
-- the records between two positions reads two entries (partition/lag.lua);
-- the value size marks kept (see size_mark_fields) so readers can size a native XRANGE.
--   local refusal = append_refusal(state); if refusal then return refusal end
--   local a = open_append(state, log, limit, rf, now)
--   local offset = append_entry(a, log, fields, value_bytes)  -- per record: {'key', k, ...}
--   (or, with the fields spelled out: local id, number, offset = next_entry(a, value_bytes);
--    redis.call('XADD', log, id, 'key', k, ..., 'n', number))
--   close_append(a, state, appended)                          -- log end, marks, wake-up
-- or, reading the state hash once and writing it once (the hot writers):
--   local known = read_append_state(state, rf)
--   local refusal = append_refusal(state, known); ...
--   local a = open_append(state, log, limit, rf, now, known)
--   ...
--   local hw, isr = close_append(a, state, appended, hw_channel, lag_max_ms)  -- + refresh_hw
-- Followers that had everything before the append were caught up until now (caught_up_ms);
-- when one did, the new log end is PUBLISHed on the appended channel, which wakes the idle
-- replicator owning it (a follower still behind needs no wake-up, its replicator is busy).

-- The state hash fields an append reads, in one HMGET (read_append_state): the refusal's,
-- open_append's, open_compaction's, the log start (Kafka's Produce answer reports it), then
-- refresh_hw's (hw_fields) from KNOWN_HW on.
local KNOWN_DELETED, KNOWN_ROLE, KNOWN_MARKED, KNOWN_APPENDED, KNOWN_INDEXED = 1, 2, 3, 4, 5
local KNOWN_LOG_START = 6
local KNOWN_HW = 7  -- log_end, hw, isr, replica.<r>.acked_offset, replica.<r>.caught_up_ms

local function read_append_state(state, rf)
  local fields = hw_fields(
    {'deleted', 'role', 'size.from', 'appended', 'compact.indexed', 'log_start'}, rf)
  return redis.call('HMGET', state, unpack(fields))
end

-- Why the partition takes no append now (an error reply), or nil. `known`: the state as
-- read_append_state read it (else read here).
local function append_refusal(state, known)
  local gone
  if known then
    gone = known[KNOWN_DELETED] and redis.error_reply(K.V1_UNKNOWN_TOPIC .. ' topic was deleted')
  else
    gone = deleted_reply(state)
  end
  if gone then
    return gone
  end
  local follower
  if known then follower = known[KNOWN_ROLE] == 'follower' else follower = is_follower(state) end
  if follower then
    return redis.error_reply(K.V1_NOT_LEADER .. ' partition is a follower')
  end
  return nil
end

local function open_append(state, log, limit, rf, now, known)
  known = known or read_append_state(state, rf)
  local log_end = tonumber(known[KNOWN_HW]) or -1
  -- A log written before entries were numbered goes on from its length.
  local numbered = tonumber(known[KNOWN_APPENDED])
  if not numbered then
    numbered = log_end < 0 and 0 or redis.call('XLEN', log)
  end
  -- now_text: the append time as the records' 'ts' field (see int_text)
  local a = {ms = -1, seq = limit - 1, limit = limit, now = now, now_text = int_text(now),
    count = 0, wake = false, log_end = log_end, numbered = numbered,
    marked = known[KNOWN_MARKED] ~= false, largest = 0, known = known, rf = rf}
  if log_end >= 0 then
    a.ms = math.floor(log_end / limit)
    a.seq = log_end - a.ms * limit
  end
  a.ms_text = int_text(a.ms) .. '-'  -- the entry ids' first part, made again when ms moves
  for r = 1, rf - 1 do
    local acked = tonumber(known[KNOWN_HW + 2 * r + 1]) or -1
    if acked >= log_end then
      redis.call('HSET', state, replica_field(r, 'caught_up_ms'), a.now_text)
      known[KNOWN_HW + 2 * r + 2] = a.now_text  -- as refresh_hw would read it back
      a.wake = true
    end
  end
  return a
end

-- Decimal digits, and a number's text without its last digit ('' below 10): next_entry
-- makes a record's id and number from the text of their tens, made once every ten records
-- (C's formatting is most of what formatting a number costs, a concatenation much less).
local DIGITS = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}
local function tens_text(x)
  if x < 10 then return '' end
  return int_text((x - x % 10) / 10)
end

-- The next record's place, for one whose value has `value_bytes` bytes: its entry id, its
-- number (the 'n' field's text) and its offset. The caller XADDs it at once (append_entry,
-- or a script's own XADD with the fields spelled out: no table per record).
local function next_entry(a, value_bytes)
  local seq = a.seq + 1
  if a.now > a.ms then
    a.ms, seq = a.now, 0
    a.ms_text = int_text(a.ms) .. '-'
  elseif seq >= a.limit then
    a.ms, seq = a.ms + 1, 0
    a.ms_text = int_text(a.ms) .. '-'
  end
  a.seq = seq
  -- seq 0 starts every ms, so a new ms always makes the id's head again
  local digit = seq % 10
  if digit == 0 or not a.id_head then a.id_head = a.ms_text .. tens_text(seq) end
  local number = a.numbered + 1
  a.numbered = number
  local number_digit = number % 10
  if number_digit == 0 or not a.number_head then a.number_head = tens_text(number) end
  local offset = a.ms * a.limit + seq
  if a.count == 0 then
    a.first = offset
  end
  a.count = a.count + 1
  if value_bytes > a.largest then
    a.largest = value_bytes
  end
  return a.id_head .. DIGITS[digit], a.number_head .. DIGITS[number_digit], offset
end

-- Compacted topics (docs/compaction.md): a writer whose caller passed the partition's
-- compaction keys (keys[at..at+2]: index, dirty, tombstones; the pod passes them when the
-- topic's cleanup.policy holds "compact") keeps them up to date here, so that compaction
-- finds what to remove without reading the log:
--   index       record key -> entry id of its latest record
--   dirty       entry id of a record a later one of its key superseded -> the superseding
--               record's offset (compaction removes it once that one is old enough)
--   tombstones  entry id of a record with a null value -> its own offset
--   open_compaction(a, KEYS, at)  -- after open_append
--   index_key(a, key, id, offset, tombstone)  -- per keyed record (append_entry does it)
-- The state hash's 'compact.indexed' (every record up to it is indexed) moves on with an
-- append only from the log end; records appended without these keys (before the topic
-- was compacted, or by a pod with a stale config) leave it behind, and
-- partition/compact_index.lua indexes from there.
local function open_compaction(a, keys, at)
  if keys[at] then
    a.compaction = {index = keys[at], dirty = keys[at + 1], tombstones = keys[at + 2]}
    -- keys[2]: the state hash (every partition script's second key)
    local indexed = a.known[KNOWN_INDEXED]
    if indexed == nil then indexed = redis.call('HGET', keys[2], 'compact.indexed') end
    indexed = tonumber(indexed) or -1
    a.compaction.contiguous = indexed == a.log_end
  end
end

local function index_key(a, key, id, offset, tombstone)
  local c = a.compaction
  local score = int_text(offset)
  local previous = redis.call('HGET', c.index, key)
  redis.call('HSET', c.index, key, id)
  if previous then redis.call('ZADD', c.dirty, score, previous) end
  if tombstone then redis.call('ZADD', c.tombstones, score, id) end
end

-- Appends one record (its stream fields: field, value, ...; 'n' is added here) whose value
-- has `value_bytes` bytes; returns its offset. (Field names: mapping/core/records.py owns them.)
-- A keyed record of a compacted partition is indexed (a keyless one is not: the pod refuses
-- those before the call).
local function append_entry(a, log, fields, value_bytes)
  local id, number, offset = next_entry(a, value_bytes)
  fields[#fields + 1] = 'n'
  fields[#fields + 1] = number
  redis.call('XADD', log, id, unpack(fields))
  if a.compaction then
    local key, tombstone = nil, true
    for j = 1, #fields - 1, 2 do
      local name = fields[j]
      if name == 'key' then key = fields[j + 1] elseif name == 'value' then tombstone = false end
    end
    if key then index_key(a, key, id, offset, tombstone) end
  end
  return offset
end

-- One record given as `n lead item1 .. itemN` from argv[at] on (mapping.core.records.record_items's
-- layout: the lead items, key and value when not null, go before the append time 'ts';
-- mapping/core/records.py owns the field names spelled here).
-- `now` is the append time's text (open_append's now_text).
-- Returns its stream fields, its value's size and where the next record starts.
local function record_fields(argv, at, now)
  local n, lead = tonumber(argv[at]), tonumber(argv[at + 1])
  local first = at + 2
  local fields, value_bytes = {}, 0
  for j = first, first + lead - 1 do
    fields[#fields + 1] = argv[j]
    if argv[j - 1] == 'value' and (j - first) % 2 == 1 then value_bytes = #argv[j] end
  end
  fields[#fields + 1] = 'ts'
  fields[#fields + 1] = now
  for j = first + lead, first + n - 1 do fields[#fields + 1] = argv[j] end
  return fields, value_bytes, first + n
end

-- The records of argv[at..last] appended by the streamadapter module's STREAMADAPTER.APPEND
-- (mapping/connection/append_module.c) instead of an XADD each: the same entries, ids and
-- numbers as next_entry and append_entry give, a call per window of arguments (Lua passes
-- at most 8000 values to a function). `layout`: 'kafka' (kafka/produce.lua's forms; a
-- record too long for a window goes through append_entry), 'v1' (key, value pairs) or
-- 'packed' (V1 records packed into each argument: mapping/core/records.py's packed_pairs).
-- Not for compacted partitions (no index kept here).
-- Returns the first and the last record's offsets (-1, -1: none).
local APPEND_WINDOW = 4000
local function append_records(a, log, argv, at, last, layout)
  local first_offset, last_offset = -1, -1
  local limit_text, now_text = int_text(a.limit), a.now_text
  while at <= last do
    local window_end = math.min(last, at + APPEND_WINDOW - 1)
    local r = redis.call('STREAMADAPTER.APPEND', log, limit_text, now_text, int_text(a.ms),
      int_text(a.seq), int_text(a.numbered), layout, unpack(argv, at, window_end))
    local taken, count = r[1], r[2]
    if count > 0 then
      if a.count == 0 then a.first = r[3] * a.limit + r[4] end
      if first_offset < 0 then first_offset = r[3] * a.limit + r[4] end
      a.count = a.count + count
      a.ms, a.seq, a.numbered = r[5], r[6], r[7]
      if r[8] > a.largest then a.largest = r[8] end
      a.ms_text, a.id_head, a.number_head = int_text(a.ms) .. '-', nil, nil
      last_offset = a.ms * a.limit + a.seq
      at = at + taken
    else  -- one record longer than a window
      local fields, value_bytes
      fields, value_bytes, at = record_fields(argv, at, now_text)
      last_offset = append_entry(a, log, fields, value_bytes)
      if first_offset < 0 then first_offset = last_offset end
    end
  end
  return first_offset, last_offset
end

-- The log end, the marks and the followers' wake-up after an append; with `hw_channel`
-- (and the replica lag) also refresh_hw's work, from the state open_append read, in the
-- same HSET: returns hw, isr, next_change then.
local function close_append(a, state, appended, hw_channel, lag_max_ms)
  local written = {}
  local last = a.log_end
  if a.count > 0 then
    last = a.ms * a.limit + a.seq
    written[1], written[2], written[3], written[4] =
      'log_end', int_text(last), 'appended', int_text(a.numbered)
    if a.compaction and a.compaction.contiguous then
      written[#written + 1] = 'compact.indexed'
      written[#written + 1] = int_text(last)
    end
    if not a.marked then  -- a new log is marked from 0, an older one from this append
      written[#written + 1] = 'size.from'
      written[#written + 1] = a.log_end < 0 and '0' or int_text(a.first)
    end
    size_mark_fields(written, a.largest, last)
  end
  local hw, isr, next_change, message
  if hw_channel then
    hw, isr, next_change, message =
      settle_hw(a.known, KNOWN_HW, last, a.rf, lag_max_ms, a.now, written)
  end
  if #written > 0 then
    redis.call('HSET', state, unpack(written))
  end
  if a.wake and a.count > 0 then
    redis.call('PUBLISH', appended, written[2])
  end
  if message then
    redis.call('PUBLISH', hw_channel, message)
  end
  return hw, isr, next_change
end
