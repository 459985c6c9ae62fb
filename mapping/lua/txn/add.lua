--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, txn_open
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, producer_id, producer_epoch
-- AddPartitionsToTxn on one partition (mapping/partition_txns.py): the producer's transaction
-- is registered here, "epoch -1" in txn_open (first offset -1: nothing appended yet; the
-- first transactional append sets it, kafka/produce.lua).
-- Returns a Kafka error code: 0 (registered, or already registered with this epoch),
-- INVALID_PRODUCER_EPOCH (a newer epoch of the producer is registered), or
-- CONCURRENT_TRANSACTIONS (an older epoch's transaction still holds records here: its marker
-- must be written first, else its records would end neither committed nor aborted).
local state, txn_open = KEYS[2], KEYS[5]
local producer_id, epoch = ARGV[4], tonumber(ARGV[5])
local gone = deleted_reply(state)
if gone then return gone end
local open = redis.call('HGET', txn_open, producer_id)
if open then
  local space = string.find(open, ' ', 1, true)
  local open_epoch = tonumber(string.sub(open, 1, space - 1))
  local first = tonumber(string.sub(open, space + 1))
  if epoch < open_epoch then return K.INVALID_PRODUCER_EPOCH end
  if epoch == open_epoch then return 0 end
  if first >= 0 then return K.CONCURRENT_TRANSACTIONS end
end
redis.call('HSET', txn_open, producer_id, int_text(epoch) .. ' -1')
return 0
