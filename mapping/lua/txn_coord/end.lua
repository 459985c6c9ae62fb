--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups
-- ARGV: producer_id, epoch, commit, grace_ms
-- EndTxn from the client, as Kafka's TransactionCoordinator.endTransaction (transactions V1:
-- the epoch must be the current one): Ongoing -> PrepareCommit / PrepareAbort, persisted
-- before any marker, so that any pod can finish it; a retry of a finished one answers NONE;
-- a Prepare* left by a dead pod (older than grace_ms) is handed to the caller to finish.
-- Returns {error code, action}: action 'finish' (write the markers, then Complete*) or ''.
local key = KEYS[1]
local pid, epoch, commit = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local grace_ms = tonumber(ARGV[4])
local txn = txn_load(key)
if not txn or txn.producer_id ~= pid then
  return {K.INVALID_PRODUCER_ID_MAPPING, ''}
end
if txn.epoch ~= epoch then
  return {K.PRODUCER_FENCED, ''}
end
local now = now_ms()
local state = txn.state
if state == 'Ongoing' then
  txn.state = commit and 'PrepareCommit' or 'PrepareAbort'
  txn.last_update_ms = now
  txn_save(key, txn)
  redis.call('HSET', key, 'end_reason', 'client')
  redis.call('HDEL', key, 'prepare_claimed')  -- this EndTxn finishes it before it answers
  return {K.NONE, 'finish'}
end
if state == 'CompleteCommit' then
  return {commit and K.NONE or K.INVALID_TXN_STATE, ''}
end
if state == 'CompleteAbort' then
  return {commit and K.INVALID_TXN_STATE or K.NONE, ''}
end
if (state == 'PrepareCommit' and commit) or (state == 'PrepareAbort' and not commit) then
  if stale_prepare(txn, now, grace_ms) then
    claim_prepare(key, txn, now)
    return {K.CONCURRENT_TRANSACTIONS, 'finish'}
  end
  return {K.CONCURRENT_TRANSACTIONS, ''}
end
return {K.INVALID_TXN_STATE, ''}  -- Empty, or the other outcome than the one prepared
