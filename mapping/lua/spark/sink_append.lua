--! include lib/append.lua
-- KEYS: log, state, hw_channel, appended, sink_markers, [index], [dirty], [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, marker_field, epoch,
--   first_index, append_module, layout, ...
-- The Spark sink's append: one chunk of one writer task's records for one partition,
-- skipping whatever an earlier attempt of the same task already stored, so a retried task or
-- a replayed micro-batch stores nothing twice.
-- KEYS = {log, state, hw_channel, appended_channel, sink markers hash}, then the compaction
-- keys on a compacted topic (see lib/append.lua).
-- ARGV[1..3] as every partition script; ARGV[4] = the writer task's marker field ('' = no
-- marker), ARGV[5] = epoch (the micro-batch id; 0 for a batch write), ARGV[6] = index of this
-- chunk's first record among the task's records for this partition, ARGV[7] = '1' when Redis
-- has the streamadapter module (mapping/connection/append_module.c: on a partition that is
-- not compacted, its one command writes the records, lib/append.lua's append_records),
-- ARGV[8] = the records' layout: 'items', per record as kafka/produce.lua takes them: n (its
-- field items), lead (items before `ts`: key and value when not null), then n items (field,
-- value, ...); or 'pairs', where every record of the chunk has a key and a value and no
-- headers: key1, value1, key2, value2, ... (their fields: key, value, ts, n, as V1's); or
-- 'packed', the same records with the module on a partition that is not compacted: their
-- count, then all of them in one argument (mapping/core/records.py's packed_pairs), which
-- the module reads, so that a record costs the script no argument of its own.
-- The marker holds "<epoch> <records stored> <last offset>" for its task: records before
-- "records stored" are already in the log (Spark re-runs a task with the same input rows in
-- the same order), a later epoch means the whole chunk is already stored.
-- Returns {hw, ISR size, records appended, last offset of the task's records (-1: none)}.
local log, state, hw_channel, appended, markers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local field, epoch, first = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local append_module = ARGV[7] == '1'
local FIRST_RECORD = 9
local key_value_pairs = ARGV[8] == 'pairs'
local packed = ARGV[8] == 'packed'
if packed and (not append_module or KEYS[6]) then
  return redis.error_reply(K.V1_BAD_REQUEST .. ' packed records need the module and no compaction')
end
local starts, count = {}, 0  -- where each record starts ('items': found by walking them)
if packed then
  count = tonumber(ARGV[FIRST_RECORD])
elseif key_value_pairs then
  count = (#ARGV - FIRST_RECORD + 1) / 2
else
  local at = FIRST_RECORD
  while at <= #ARGV do
    starts[#starts + 1] = at
    at = at + 2 + tonumber(ARGV[at])
  end
  count = #starts
end
local function start_of(k)
  if key_value_pairs then return FIRST_RECORD + 2 * (k - 1) end
  return starts[k]
end

-- Where the packed records after the first `skip` ones start in `records` (each record a
-- key and a value, each a 4-byte big-endian length and its bytes).
local function packed_after(records, skip)
  local at = 1
  for _ = 1, 2 * skip do
    local b1, b2, b3, b4 = string.byte(records, at, at + 3)
    at = at + 4 + ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  end
  return at
end

local refusal = append_refusal(state)
if refusal then return refusal end

local stored, last_offset = 0, -1
if field ~= '' then
  local marker = redis.call('HGET', markers, field)
  if marker then
    local e, n, o = string.match(marker, '^(%d+) (%d+) (%-?%d+)$')
    e, n, o = tonumber(e), tonumber(n), tonumber(o)
    if e == epoch then
      stored, last_offset = n, o
    elseif e > epoch then
      stored, last_offset = first + count, o
    end
  end
end

local skip = math.max(0, math.min(count, stored - first))
local now = now_ms()
local appended_now = 0
if skip < count then
  local a = open_append(state, log, limit, rf, now)
  open_compaction(a, KEYS, 6)
  if packed then
    local records = ARGV[FIRST_RECORD + 1]
    if skip > 0 then records = string.sub(records, packed_after(records, skip)) end
    local _
    _, last_offset = append_records(a, log, {records}, 1, 1, 'packed')
  elseif append_module and not a.compaction then
    local _
    _, last_offset = append_records(a, log, ARGV, start_of(skip + 1), #ARGV,
      key_value_pairs and 'v1' or 'kafka')
  elseif key_value_pairs then
    for k = skip + 1, count do
      local at = start_of(k)
      local value = ARGV[at + 1]
      local id, number, offset = next_entry(a, #value)
      -- a record's fields (mapping/core/records.py owns the names)
      redis.call('XADD', log, id, 'key', ARGV[at], 'value', value, 'ts', a.now_text, 'n', number)
      if a.compaction then index_key(a, ARGV[at], id, offset, false) end
      last_offset = offset
    end
  else
    for k = skip + 1, count do
      local fields, value_bytes = record_fields(ARGV, starts[k], a.now_text)
      last_offset = append_entry(a, log, fields, value_bytes)
    end
  end
  close_append(a, state, appended)
  appended_now = count - skip
  if field ~= '' then
    redis.call('HSET', markers, field,
      fmt(epoch) .. ' ' .. fmt(first + count) .. ' ' .. fmt(last_offset))
  end
end
local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
return {hw, #isr, appended_now, last_offset}
