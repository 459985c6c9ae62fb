--! include lib/partition.lua
--! include lib/txn_open.lua
-- KEYS: log, state, hw_channel, appended, txn_open
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, producer_id, producer_epoch,
--   transaction
-- AddPartitionsToTxn on one partition (mapping/partition/partition_txns.py): the producer's transaction
-- is registered here, "epoch -1 transaction" in txn_open (first offset -1: nothing appended
-- yet; the first transactional append sets it, kafka/produce.lua; transaction: the
-- coordinator's txn_start_ms, -1 unknown).
-- Returns a Kafka error code: 0 (registered, or already registered for this transaction),
-- INVALID_PRODUCER_EPOCH (a newer epoch of the producer is registered), or
-- CONCURRENT_TRANSACTIONS (another transaction of the producer, an older epoch's or an
-- earlier one of this epoch, still holds records here: its marker must be written first, else
-- its records would end neither committed nor aborted).
local state, txn_open = KEYS[2], KEYS[5]
local producer_id, epoch, transaction = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local gone = deleted_reply(state)
if gone then return gone end
local open = redis.call('HGET', txn_open, producer_id)
if open then
  local open_epoch, first, open_transaction = txn_open_parse(open)
  if epoch < open_epoch then return K.INVALID_PRODUCER_EPOCH end
  local same = epoch == open_epoch
    and (open_transaction == transaction or transaction < 0 or open_transaction < 0)
  if same then
    if transaction >= 0 and open_transaction < 0 then
      redis.call('HSET', txn_open, producer_id, txn_open_text(epoch, first, transaction))
    end
    return 0
  end
  if first >= 0 then return K.CONCURRENT_TRANSACTIONS end
end
redis.call('HSET', txn_open, producer_id, txn_open_text(epoch, -1, transaction))
return 0
