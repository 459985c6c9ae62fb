--! include lib/append.lua
-- KEYS: log, state, hw_channel, appended, producers, producer_times, [index], [dirty],
--   [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, producer_id,
--   producer_epoch, base_sequence, record_count, producer_id_expiration_ms, ...
-- Append one Kafka RecordBatch to a partition's leader log through lib/append.lua, as every
-- writer of a log does (offsets are consecutive within the call: base offset + delta is
-- exact), with the idempotent producer's sequence checks.
-- KEYS = {log, state, hw_channel, appended, producers, producer_times}, then the compaction
-- keys on a compacted topic (see lib/append.lua).
-- ARGV[4] = producer id (-1: not idempotent), ARGV[5] = producer epoch, ARGV[6] = base
-- sequence, ARGV[7] = record count, ARGV[8] = how long a producer's state outlives its last
-- append (ms, Kafka's producer.id.expiration.ms); then per record: n (its field items), lead (items
-- before `ts`: key and value, when not null), then n items (field, value, ...); or, for the
-- common records without headers (the fields record_items would give, in its order):
-- -1, value, create_ts (a null key) or -2, key, value, create_ts.
-- Returns {status, hw, ISR size, base offset, last offset[, append time]}: status 0
-- (appended, with the records' append time 'ts': a LogAppendTime topic's Produce answer
-- carries it), 1 (a retry of a batch already stored: its original offsets),
-- 45 OUT_OF_ORDER_SEQUENCE_NUMBER, 47 INVALID_PRODUCER_EPOCH.  The producers hash keeps per producer id
-- "epoch first_seq last_seq base_offset last_offset ..." for its last five batches, and
-- producer_times its last append's time: an idempotent append first drops (a few of) the
-- producers idle for longer than the expiration, so the hash is bounded by the producers
-- of the last expiration period, not by every producer ever (a producer back after that
-- starts afresh, as in Kafka).
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local producers, producer_times = KEYS[5], KEYS[6]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local producer_id, epoch, base_seq = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local count, expiration_ms = tonumber(ARGV[7]), tonumber(ARGV[8])
local EXPIRED_PER_CALL = 8
local SEQ_LIMIT = 2147483648
local KEPT_BATCHES = 5

local refusal = append_refusal(state)
if refusal then return refusal end

local now = now_ms()
local batches = {}
if producer_id ~= '-1' then
  local expired = redis.call('ZRANGEBYSCORE', producer_times, '-inf', int_text(now - expiration_ms),
    'LIMIT', 0, EXPIRED_PER_CALL)
  if #expired > 0 then
    redis.call('HDEL', producers, unpack(expired))
    redis.call('ZREM', producer_times, unpack(expired))
  end
  local entry = redis.call('HGET', producers, producer_id)
  local last_seq = (base_seq + count - 1) % SEQ_LIMIT
  if entry then
    local v = {}
    for word in string.gmatch(entry, '%S+') do v[#v + 1] = tonumber(word) end
    local stored_epoch = v[1]
    if epoch < stored_epoch then
      return {K.INVALID_PRODUCER_EPOCH, -1, 0, -1, -1}
    end
    if epoch == stored_epoch then
      for i = 2, #v, 4 do
        batches[#batches + 1] = {v[i], v[i + 1], v[i + 2], v[i + 3]}
      end
      for _, b in ipairs(batches) do
        if b[1] == base_seq and b[2] == last_seq then
          local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
          return {1, hw, #isr, b[3], b[4]}
        end
      end
      if #batches > 0 and base_seq ~= (batches[#batches][2] + 1) % SEQ_LIMIT then
        return {K.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, 0, -1, -1}
      end
    elseif base_seq ~= 0 then
      return {K.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, 0, -1, -1}
    end
  end
end

local a = open_append(state, log, limit, rf, now)
open_compaction(a, KEYS, 7)
local base_offset, last_offset = -1, -1
local i = 9
local ts = a.now_text
-- locals, not K's fields: read once per record
local SHORT_NULL_KEY, SHORT_KEY_VALUE = K.SHORT_NULL_KEY, K.SHORT_KEY_VALUE
for _ = 1, count do
  -- the short forms' fields spelled out in the XADD (the same as record_items gives; the
  -- forms and the field names: mapping/records.py owns them)
  local form = ARGV[i]
  if form == SHORT_NULL_KEY then
    local value = ARGV[i + 1]
    local id, number, offset = next_entry(a, #value)
    redis.call('XADD', log, id, 'value', value, 'ts', ts, 'create_ts', ARGV[i + 2],
      'null', 'key', 'n', number)
    last_offset = offset
    i = i + 3
  elseif form == SHORT_KEY_VALUE then
    local value = ARGV[i + 2]
    local id, number, offset = next_entry(a, #value)
    redis.call('XADD', log, id, 'key', ARGV[i + 1], 'value', value, 'ts', ts,
      'create_ts', ARGV[i + 3], 'n', number)
    if a.compaction then index_key(a, ARGV[i + 1], id, offset, false) end
    last_offset = offset
    i = i + 4
  else
    local fields, value_bytes
    fields, value_bytes, i = record_fields(ARGV, i, ts)
    last_offset = append_entry(a, log, fields, value_bytes)
  end
  if base_offset < 0 then base_offset = last_offset end
end
close_append(a, state, appended)
if producer_id ~= '-1' then
  batches[#batches + 1] = {base_seq, (base_seq + count - 1) % SEQ_LIMIT, base_offset, last_offset}
  local first = math.max(1, #batches - KEPT_BATCHES + 1)
  local words = {fmt(epoch)}
  for k = first, #batches do
    local b = batches[k]
    words[#words + 1] = fmt(b[1]) .. ' ' .. fmt(b[2]) .. ' ' .. fmt(b[3]) .. ' ' .. fmt(b[4])
  end
  redis.call('HSET', producers, producer_id, table.concat(words, ' '))
  redis.call('ZADD', producer_times, int_text(now), producer_id)
end
local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
return {0, hw, #isr, base_offset, last_offset, now}
