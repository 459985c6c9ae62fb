--! include lib/append.lua
-- KEYS: log, state, hw_channel, appended, [index], [dirty], [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, append_module, key1, value1, ...
-- V1 PRODUCE: append records to a partition's leader log (see lib/append.lua for the ids, the
-- numbering, the size marks and the followers' wake-up).
-- ARGV[4] = '1' when Redis has the streamadapter module (mapping/connection/append_module.c):
-- the records of a partition that is not compacted are then written by its one command,
-- not an XADD each (lib/append.lua's append_records).
-- ARGV[5..]: key1, value1, key2, value2, ...   Returns {hw, ISR size, offset1, offset2, ...}:
-- acks=all is answered from the reply itself when hw and the ISR already allow it.
-- KEYS[5..7]: the compaction keys, on a compacted topic (see lib/append.lua).
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = 2 ^ tonumber(ARGV[1])
local rf = tonumber(ARGV[2])
local lag_max_ms = rf > 1 and tonumber(ARGV[3]) or 0  -- only followers lag
-- the state hash read once (refusal, log end, marks, hw) and written once (close_append)
local known = read_append_state(state, rf)
local refusal = append_refusal(state, known)
if refusal then return refusal end

local now = now_ms()
local a = open_append(state, log, limit, rf, now, known)
open_compaction(a, KEYS, 5)
local argv, ts = ARGV, a.now_text
local compaction = a.compaction
local offsets = {0, 0}
local first_record = 5
if ARGV[4] == '1' and not compaction then
  -- one call's offsets are consecutive (lib/append.lua)
  local first = append_records(a, log, argv, first_record, #argv, 'v1')
  for k = 0, (#argv - first_record + 1) / 2 - 1 do offsets[k + 3] = first + k end
  first_record = #argv + 1
end
for i = first_record, #argv, 2 do
  local value = argv[i + 1]
  local id, number, offset = next_entry(a, #value)
  -- a record's fields (mapping/core/records.py owns the names)
  redis.call('XADD', log, id, 'key', argv[i], 'value', value, 'ts', ts, 'n', number)
  if compaction then index_key(a, argv[i], id, offset, false) end
  offsets[#offsets + 1] = offset
end
local hw, isr = close_append(a, state, appended, hw_channel, lag_max_ms)
offsets[1], offsets[2] = hw, #isr
return offsets
