--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups
-- ARGV: transactional_id, timeout_ms, new_producer_id, expected_producer_id, expected_epoch,
--   grace_ms
-- InitProducerId with a transactional id, as Kafka's TransactionCoordinator
-- (prepareInitProducerIdTransit): a new id gets new_producer_id and epoch 0; an existing one
-- gets its epoch bumped (a new producer id once the epoch is exhausted), which fences the
-- previous session. expected_producer_id/expected_epoch (-1/-1: none, KIP-360's v3+ fields)
-- let a producer resume after an error. An Ongoing transaction is fenced: epoch bumped, state
-- PrepareAbort, and the caller aborts it (markers) and answers CONCURRENT_TRANSACTIONS, so the
-- client retries and gets the next epoch (as Kafka's PrepareEpochFence). A Prepare* left by a
-- dead pod (older than grace_ms) is handed to the caller to finish, and so is an unclaimed
-- one when the producer that prepared it names its own id and epoch (a KIP-360 bump after a
-- later error: its EndTxn was answered, whatever finished it has stopped; see
-- lib/txn_coord.lua claim_prepare).
-- Returns {error code, producer id, epoch, action}: action '' (answer), 'finish' (finish the
-- transaction, then answer CONCURRENT_TRANSACTIONS).
local key = KEYS[1]
local timeout_ms = tonumber(ARGV[2])
local new_pid = tonumber(ARGV[3])
local expected_pid, expected_epoch = tonumber(ARGV[4]), tonumber(ARGV[5])
local grace_ms = tonumber(ARGV[6])
local expected = expected_pid >= 0
local now = now_ms()

local txn = txn_load(key)
if not txn then
  txn = {producer_id = new_pid, last_producer_id = -1, epoch = -1, last_epoch = -1,
         state = 'Empty', timeout_ms = timeout_ms, txn_start_ms = -1, last_update_ms = now}
  redis.call('HSET', key, 'transactional_id', ARGV[1])
end

-- Kafka's isValidProducerId
if expected and not (txn.epoch == -1 or expected_pid == txn.producer_id
    or (expected_pid == txn.last_producer_id and epoch_exhausted(expected_epoch))) then
  return {K.PRODUCER_FENCED, -1, -1, ''}
end

if is_prepare(txn.state) then
  local own = expected and expected_pid == txn.producer_id and expected_epoch == txn.epoch
  if stale_prepare(txn, now, grace_ms) or (own and not prepare_claimed(key)) then
    claim_prepare(key, txn, now)  -- another caller waits a grace again
    return {K.CONCURRENT_TRANSACTIONS, -1, -1, 'finish'}
  end
  return {K.CONCURRENT_TRANSACTIONS, -1, -1, ''}
end

if txn.state == 'Ongoing' then
  -- fence: the bumped epoch is never handed out; the retry bumps once more
  txn.epoch = txn.epoch + 1
  txn.last_epoch = -1
  txn.state = 'PrepareAbort'
  claim_prepare(key, txn, now)  -- this caller aborts it
  redis.call('HSET', key, 'end_reason', 'fenced')
  return {K.CONCURRENT_TRANSACTIONS, -1, -1, 'finish'}
end

-- Empty, CompleteCommit, CompleteAbort
if epoch_exhausted(txn.epoch) and (not expected or expected_epoch == txn.epoch) then
  txn.last_producer_id = txn.producer_id
  txn.last_epoch = expected and txn.epoch or -1
  txn.producer_id = new_pid
  txn.epoch = 0
elseif not expected or txn.epoch == -1 or expected_epoch == txn.epoch then
  txn.last_epoch = expected and txn.epoch or -1
  txn.epoch = txn.epoch + 1
elseif expected_epoch == txn.last_epoch then
  -- a retry of a call that succeeded: the same epoch again
else
  return {K.PRODUCER_FENCED, -1, -1, ''}
end
txn.state = 'Empty'
txn.timeout_ms = timeout_ms
txn.txn_start_ms = -1
txn.last_update_ms = now
txn_save(key, txn)
redis.call('DEL', KEYS[2], KEYS[3])
return {K.NONE, txn.producer_id, txn.epoch, ''}
