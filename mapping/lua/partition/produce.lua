--! include lib/append.lua
-- KEYS: log, state, hw_channel, appended, [index], [dirty], [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, append_module, records, ...
-- V1 PRODUCE: append records to a partition's leader log (see lib/append.lua for the ids, the
-- numbering, the size marks and the followers' wake-up).
-- ARGV[4] = '1' when Redis has the streamadapter module (mapping/connection/append_module.c)
-- and the partition is not compacted: ARGV[5..] are then the records packed (each argument
-- one or more: mapping/core/records.py's packed_pairs), which the module's one command reads
-- and writes (lib/append.lua's append_records), so that a record costs the script no
-- argument of its own; '0': ARGV[5..] are key1, value1, key2, value2, ..., an XADD each.
-- Returns {hw, ISR size, first offset, last offset} (one call's offsets are consecutive:
-- lib/append.lua): acks=all is answered from the reply itself when hw and the ISR already
-- allow it.
-- KEYS[5..7]: the compaction keys, on a compacted topic (see lib/append.lua).
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = 2 ^ tonumber(ARGV[1])
local rf = tonumber(ARGV[2])
local lag_max_ms = rf > 1 and tonumber(ARGV[3]) or 0  -- only followers lag
if ARGV[4] == '1' and KEYS[5] then  -- (the pod never sends it: a compacted append indexes)
  return redis.error_reply(K.V1_BAD_REQUEST .. ' packed records on a compacted partition')
end
-- the state hash read once (refusal, log end, marks, hw) and written once (close_append)
local known = read_append_state(state, rf)
local refusal = append_refusal(state, known)
if refusal then return refusal end

local now = now_ms()
local a = open_append(state, log, limit, rf, now, known)
open_compaction(a, KEYS, 5)
local argv, ts = ARGV, a.now_text
local compaction = a.compaction
local first_offset, last_offset = -1, -1
if ARGV[4] == '1' then
  first_offset, last_offset = append_records(a, log, argv, 5, #argv, 'packed')
else
  for i = 5, #argv, 2 do
    local value = argv[i + 1]
    local id, number, offset = next_entry(a, #value)
    -- a record's fields (mapping/core/records.py owns the names)
    redis.call('XADD', log, id, 'key', argv[i], 'value', value, 'ts', ts, 'n', number)
    if compaction then index_key(a, argv[i], id, offset, false) end
    if first_offset < 0 then first_offset = offset end
    last_offset = offset
  end
end
local hw, isr = close_append(a, state, appended, hw_channel, lag_max_ms)
return {hw, #isr, first_offset, last_offset}
