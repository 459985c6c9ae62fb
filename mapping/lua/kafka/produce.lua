--! include lib/append.lua
--! include lib/txn_open.lua
-- KEYS: log, state, hw_channel, appended, producers, producer_times, txn_open, [index],
--   [dirty], [tombstones]
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, producer_id,
--   producer_epoch, base_sequence, record_count, producer_id_expiration_ms, transactional,
--   lost_gap, append_module, ...
-- Append one Kafka RecordBatch to a partition's leader log through lib/append.lua, as every
-- writer of a log does (offsets are consecutive within the call: base offset + delta is
-- exact), with the idempotent producer's sequence checks.
-- KEYS = {log, state, hw_channel, appended, producers, producer_times, txn_open}, then the
-- compaction keys on a compacted topic (see lib/append.lua).
-- ARGV[4] = producer id (-1: not idempotent), ARGV[5] = producer epoch, ARGV[6] = base
-- sequence, ARGV[7] = record count, ARGV[8] = how long a producer's state outlives its last
-- append (ms, Kafka's producer.id.expiration.ms), ARGV[9] = '1' for a transactional batch
-- (its records in the long form only), ARGV[10] = '1' when the pod failed this very batch
-- before and no earlier one of its producer (mapping/partition/sequence_fence.py): a gap before it
-- is acknowledged records a Redis failover took back, and the batch is appended after it
-- (what was lost stays lost; the producer goes on), ARGV[11] = '1' when Redis has the
-- streamadapter module (mapping/connection/append_module.c): the records of a batch that
-- is neither transactional nor compacted are then written by its one command, not an XADD
-- each (lib/append.lua's append_records); then per record: n (its field items),
-- lead (items before `ts`: key and value, when not null), then n items (field, value, ...);
-- or, for the
-- common records without headers (the fields record_items would give, in its order):
-- -1, value, create_ts (a null key) or -2, key, value, create_ts; or, with the module, a
-- RecordBatch's plain records as sent: -3, first timestamp, count, their bytes (the module
-- reads them: mapping/connection/append_module.c).
-- Returns {status, hw, ISR size, base offset, last offset, append time, log start}: status 0
-- (appended, with the records' append time 'ts': a LogAppendTime topic's Produce answer
-- carries it; -1 for the other statuses), 1 (a retry of a batch already stored: its
-- original offsets),
-- 45 OUT_OF_ORDER_SEQUENCE_NUMBER (a sequence at or below the last one stored, not one of
-- the batches kept), 59 UNKNOWN_PRODUCER_ID (a sequence ahead of the state stored here: a
-- gap, or a newer epoch starting past 0; the pod answers it "not written" when the gap is a
-- batch it failed, else as is: librdkafka then bumps its epoch, KIP-360, where Kafka's
-- OUT_OF_ORDER_SEQUENCE_NUMBER would be fatal to it), 47 INVALID_PRODUCER_EPOCH,
-- 48 INVALID_TXN_STATE.
-- Transactions (Kafka's ProducerAppendInfo and its AddPartitionsToTxn verification): a
-- transactional batch is appended only when its producer is registered on the partition
-- (txn_open, txn/add.lua) with the batch's epoch (an older one: INVALID_PRODUCER_EPOCH; not
-- registered, or a newer one registered: INVALID_TXN_STATE), after the epoch check against
-- the producers hash (a batch older than the epoch last seen here, e.g. a zombie's after its
-- fencing abort marker: INVALID_PRODUCER_EPOCH); its records carry 'pid' and
-- 'pe' (mapping/core/records.py), are not indexed for compaction (an abort must not let them
-- supersede committed records), and the transaction's first append sets its first offset
-- (and the state's txn_first, the last stable offset, when no other is open). An idempotent
-- producer's plain batch while its transaction is open here: INVALID_TXN_STATE.  The producers hash keeps per producer id
-- "epoch first_seq last_seq base_offset last_offset ..." for its last five batches, and
-- producer_times its last append's time: an idempotent append first drops (a few of) the
-- producers idle for longer than the expiration, so the hash is bounded by the producers
-- of the last expiration period, not by every producer ever (a producer back after that
-- starts afresh, as in Kafka).
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local producers, producer_times = KEYS[5], KEYS[6]
local limit = 2 ^ tonumber(ARGV[1])
local rf = tonumber(ARGV[2])
local lag_max_ms = rf > 1 and tonumber(ARGV[3]) or 0  -- only followers lag
local producer_id, count = ARGV[4], tonumber(ARGV[7])
local idempotent = producer_id ~= '-1'
local epoch, base_seq, expiration_ms = -1, -1, 0
if idempotent then
  epoch, base_seq, expiration_ms = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
end
local txn_open, transactional = KEYS[7], ARGV[9] == '1'
local lost_gap = ARGV[10] == '1'
local append_module = ARGV[11] == '1'
local EXPIRED_PER_CALL = '8'
local SEQ_LIMIT = 2147483648
local KEPT_BATCHES = 5

-- the state hash read once (refusal, log end, marks, hw) and written once (close_append)
local known = read_append_state(state, rf)
local refusal = append_refusal(state, known)
if refusal then return refusal end
-- the log start as stored (-1: nothing was ever removed), which Kafka's Produce answer
-- reports whatever the status (a producer told UNKNOWN_PRODUCER_ID compares it with its last
-- acknowledged offset)
local log_start = tonumber(known[KNOWN_LOG_START]) or -1
local function answer(status, hw, isr_size, base, last, append_time)
  return {status, hw, isr_size, base, last, append_time or -1, log_start}
end

local now = now_ms()
-- the producer's last batches as the producers hash keeps them, each "first_seq last_seq
-- base_offset last_offset" (the text as stored: only a retry's offsets are read as numbers)
local batches = {}
local txn_first = nil  -- the transaction's first offset here (-1: this is its first append)
local txn_transaction = -1  -- which transaction of the producer (lib/txn_open.lua)
local last_seq = (base_seq + count - 1) % SEQ_LIMIT
if idempotent then
  local expired = redis.call('ZRANGEBYSCORE', producer_times, '-inf', int_text(now - expiration_ms),
    'LIMIT', '0', EXPIRED_PER_CALL)
  if #expired > 0 then
    redis.call('HDEL', producers, unpack(expired))
    redis.call('ZREM', producer_times, unpack(expired))
  end
  -- the epoch first, as Kafka's ProducerAppendInfo.checkProducerEpoch: a fenced producer's
  -- batch (a marker with a newer epoch was written here) is INVALID_PRODUCER_EPOCH
  local stored_epoch, entry = producer_epoch(producers, producer_id)
  if epoch < stored_epoch then
    return answer(K.INVALID_PRODUCER_EPOCH, -1, 0, -1, -1)
  end
  local open = redis.call('HGET', txn_open, producer_id)
  if transactional then
    if not open then return answer(K.INVALID_TXN_STATE, -1, 0, -1, -1) end
    local open_epoch, first, transaction = txn_open_parse(open)
    if epoch < open_epoch then return answer(K.INVALID_PRODUCER_EPOCH, -1, 0, -1, -1) end
    if epoch > open_epoch then return answer(K.INVALID_TXN_STATE, -1, 0, -1, -1) end
    txn_first, txn_transaction = first, transaction
  elseif open then
    return answer(K.INVALID_TXN_STATE, -1, 0, -1, -1)
  end
  if entry then
    if epoch == stored_epoch then
      local words = {}
      for word in string.gmatch(entry, '%S+') do words[#words + 1] = word end
      local first_text, last_text = int_text(base_seq), int_text(last_seq)
      for j = 2, #words - 3, 4 do
        if words[j] == first_text and words[j + 1] == last_text then
          local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
          return answer(1, hw, #isr, tonumber(words[j + 2]), tonumber(words[j + 3]))
        end
        batches[#batches + 1] =
          words[j] .. ' ' .. words[j + 1] .. ' ' .. words[j + 2] .. ' ' .. words[j + 3]
      end
      if #batches > 0 then
        local ahead = (base_seq - tonumber(words[#words - 2]) - 1) % SEQ_LIMIT
        if ahead >= SEQ_LIMIT / 2 then  -- at or below the last sequence stored
          return answer(K.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, 0, -1, -1)
        end
        if ahead > 0 and not lost_gap then
          return answer(K.UNKNOWN_PRODUCER_ID, -1, 0, -1, -1)
        end
      end
    elseif base_seq ~= 0 and not lost_gap then
      -- a newer epoch past its first batch: that batch was stored and taken back
      return answer(K.UNKNOWN_PRODUCER_ID, -1, 0, -1, -1)
    end
  end
end

local a = open_append(state, log, limit, rf, now, known)
if not transactional then open_compaction(a, KEYS, 8) end
local compaction = a.compaction
local base_offset, last_offset = -1, -1
local i = 12
local argv, ts = ARGV, a.now_text
-- locals, not K's fields: read once per record
local SHORT_NULL_KEY, SHORT_KEY_VALUE = K.SHORT_NULL_KEY, K.SHORT_KEY_VALUE
if append_module and not compaction and not transactional then
  base_offset, last_offset = append_records(a, log, argv, i, #argv, 'kafka')
  count = 0  -- every record written
elseif argv[i] == K.RAW_BATCH then
  return redis.error_reply(K.V1_BAD_REQUEST .. ' a raw batch needs the streamadapter module')
end
for _ = 1, count do
  -- the short forms' fields spelled out in the XADD (the same as record_items gives; the
  -- forms and the field names: mapping/core/records.py owns them)
  local form = argv[i]
  if form == SHORT_NULL_KEY then
    local value = argv[i + 1]
    local id, number, offset = next_entry(a, #value)
    redis.call('XADD', log, id, 'value', value, 'ts', ts, 'create_ts', argv[i + 2],
      'null', 'key', 'n', number)
    last_offset = offset
    i = i + 3
  elseif form == SHORT_KEY_VALUE then
    local value = argv[i + 2]
    local id, number, offset = next_entry(a, #value)
    redis.call('XADD', log, id, 'key', argv[i + 1], 'value', value, 'ts', ts,
      'create_ts', argv[i + 3], 'n', number)
    if compaction then index_key(a, argv[i + 1], id, offset, false) end
    last_offset = offset
    i = i + 4
  else
    local fields, value_bytes
    fields, value_bytes, i = record_fields(argv, i, ts)
    if transactional then
      fields[#fields + 1] = 'pid'
      fields[#fields + 1] = producer_id
      fields[#fields + 1] = 'pe'
      fields[#fields + 1] = argv[5]
    end
    last_offset = append_entry(a, log, fields, value_bytes)
  end
  if base_offset < 0 then base_offset = last_offset end
end
local hw, isr = close_append(a, state, appended, hw_channel, lag_max_ms)
if txn_first == -1 then
  redis.call('HSET', txn_open, producer_id, txn_open_text(epoch, base_offset, txn_transaction))
  -- offsets grow: an earlier open transaction's first offset is smaller, so only a partition
  -- with none open gets a new last stable offset
  redis.call('HSETNX', state, 'txn_first', int_text(base_offset))
end
if idempotent then
  batches[#batches + 1] = int_text(base_seq) .. ' ' .. int_text(last_seq) .. ' ' ..
    int_text(base_offset) .. ' ' .. int_text(last_offset)
  local words = {int_text(epoch)}
  for k = math.max(1, #batches - KEPT_BATCHES + 1), #batches do
    words[#words + 1] = batches[k]
  end
  redis.call('HSET', producers, producer_id, table.concat(words, ' '))
  redis.call('ZADD', producer_times, int_text(now), producer_id)
end
return answer(0, hw, #isr, base_offset, last_offset, now)
