--! include lib/append.lua
--! include lib/txn_open.lua
-- KEYS: log, state, hw_channel, appended, txn_open, txn_aborted, producers, producer_times
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, producer_id, producer_epoch,
--   commit, transaction
-- Ends a producer's transaction on one partition (mapping/partition/partition_txns.py): when the
-- producer is registered in txn_open for this transaction (the same epoch and transaction,
-- or an older epoch: a fenced session's), appends its commit or abort marker (a control
-- entry: 'ctl', 'pid', 'pe', 'ts', 'n'; mapping/core/records.py owns the field names) through
-- lib/append.lua like any record, drops it from txn_open, records an abort in txn_aborted
-- ("<pid> <first offset>" -> the marker's offset) and recomputes the state's txn_first (the
-- smallest first offset still open: what the last stable offset is; absent when none is).
-- Idempotent: a second call finds nothing open. A marker for another transaction of the same
-- producer and epoch (a late finisher's: transaction differs) ends nothing.
-- ARGV[6] = '1' commit, '0' abort; ARGV[7] = the transaction (the coordinator's
-- txn_start_ms; -1: whichever is registered with this epoch).
-- The producers hash learns the marker's epoch (as Kafka's appendEndTxnMarker): after a
-- fencing abort (written with the bumped epoch) the zombie's batches are refused with
-- INVALID_PRODUCER_EPOCH (kafka/produce.lua).
-- The hw channel hears of it (the LSO moved: read_committed Fetch long-polls wake), in
-- refresh_hw's format. Aborted-index entries whose marker is below the log start go.
-- Returns {marker offset, hw}, or {-1, hw} when nothing was open (already done).
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local txn_open, txn_aborted = KEYS[5], KEYS[6]
local producers, producer_times = KEYS[7], KEYS[8]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local producer_id, epoch, commit = ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local transaction = tonumber(ARGV[7] or '-1')
local gone = deleted_reply(state)
if gone then return gone end

local now = now_ms()
local open = redis.call('HGET', txn_open, producer_id)
local open_epoch, first, open_transaction = -1, -1, -1
if open then open_epoch, first, open_transaction = txn_open_parse(open) end
local ends = open and (open_epoch < epoch or (open_epoch == epoch
  and (transaction < 0 or open_transaction < 0 or open_transaction == transaction)))
if not ends then
  return {-1, (refresh_hw(state, hw_channel, rf, lag_max_ms, now))}
end
local a = open_append(state, log, limit, rf, now)
local id, number, offset = next_entry(a, 0)
redis.call('XADD', log, id, 'ctl', commit and 'commit' or 'abort', 'pid', producer_id,
  'pe', int_text(epoch), 'ts', a.now_text, 'n', number)
close_append(a, state, appended)
redis.call('HDEL', txn_open, producer_id)
if not commit and first >= 0 then
  redis.call('ZADD', txn_aborted, int_text(offset), producer_id .. ' ' .. int_text(first))
end
local known_epoch = producer_epoch(producers, producer_id)
if epoch > known_epoch then
  -- a new epoch: its batches' sequences start afresh (Kafka's maybeUpdateProducerEpoch)
  redis.call('HSET', producers, producer_id, int_text(epoch))
end
redis.call('ZADD', producer_times, int_text(now), producer_id)
local smallest = nil
for _, text in ipairs(redis.call('HVALS', txn_open)) do
  local _, f = txn_open_parse(text)
  if f >= 0 and (smallest == nil or f < smallest) then smallest = f end
end
if smallest then
  redis.call('HSET', state, 'txn_first', fmt(smallest))
else
  redis.call('HDEL', state, 'txn_first')
end
local log_start = redis.call('HGET', state, 'log_start')
if log_start then
  redis.call('ZREMRANGEBYSCORE', txn_aborted, '-inf', '(' .. log_start)
end
local hw, isr, next_change = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
redis.call('PUBLISH', hw_channel, fmt(hw) .. ' ' .. #isr .. ' ' .. fmt(next_change))
return {offset, hw}
