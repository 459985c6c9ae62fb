--! include lib/append.lua
-- KEYS: log, state, hw_channel, appended, [index], [dirty], [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, ...
-- The offsets mirror (mapping/group/offsets_mirror.py): append offset commit records, in Kafka's
-- format (mapping/group/offsets_topic.py), to one partition of __consumer_offsets.
-- ARGV[4..]: key, value, time, ... per record: value '' is a tombstone (a deleted offset: no
-- 'value' field, 'null' = 'value'); time is when the commit or deletion happened (ms, Redis'
-- clock, read by the script that made it), stored as the record's CreateTime.
-- KEYS[5..7]: the compaction keys (on a compacted mirror). The index names each key's latest
-- record: a record older than it (another pod's later commit of the same partition was
-- mirrored first) is left out, so the log's last word on a key is its latest commit.
-- Returns {hw, records appended}.
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local refusal = append_refusal(state)
if refusal then return refusal end

local now = now_ms()
local a = open_append(state, log, limit, rf, now)
open_compaction(a, KEYS, 5)

-- The CreateTime of the key's latest record in the log (nil: none known).
local function latest_time(key)
  if not a.compaction then return nil end
  local id = redis.call('HGET', a.compaction.index, key)
  if not id then return nil end
  local entry = redis.call('XRANGE', log, id, id)[1]
  if not entry then return nil end
  local fields = entry[2]
  local append_time, delta = nil, nil
  for j = 1, #fields - 1, 2 do
    local name = fields[j]
    if name == 'create_ts' then return tonumber(fields[j + 1]) end
    if name == 'ts' then append_time = tonumber(fields[j + 1]) end
    if name == 'create_dt' then delta = tonumber(fields[j + 1]) end
  end
  -- a CreateTime as the streamadapter module writes it (mapping/core/records.py)
  if append_time and delta then return append_time + delta end
  return nil
end

for i = 4, #ARGV - 2, 3 do
  local key, value, time = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local last = latest_time(key)
  if not last or last <= tonumber(time) then
    local id, number, offset = next_entry(a, #value)
    -- the fields in mapping/core/records.py's order: key, value, ts, create_ts, null, n
    if value == '' then
      redis.call('XADD', log, id, 'key', key, 'ts', a.now_text, 'create_ts', time,
        'null', 'value', 'n', number)
    else
      redis.call('XADD', log, id, 'key', key, 'value', value, 'ts', a.now_text,
        'create_ts', time, 'n', number)
    end
    if a.compaction then index_key(a, key, id, offset, value == '') end
  end
end
close_append(a, state, appended)
local hw = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
return {hw, a.count}
