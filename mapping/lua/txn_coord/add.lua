--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups, registering
-- ARGV: producer_id, epoch, kind, grace_ms, ...
-- AddPartitionsToTxn (kind 'partitions', members "<topic>\t<partition>"), AddOffsetsToTxn
-- (kind 'groups', members group parts) and KIP-890's verification (kind 'verify', partition
-- members: nothing changes), as Kafka's TransactionCoordinator.handleAddPartitionsToTransaction
-- and handleVerifyPartitionsInTransaction. The first add after Empty/Complete* starts a
-- transaction (Ongoing, txn_start_ms = now, and always after the previous one's: the start
-- names the transaction on its partitions, txn/add.lua and txn/marker.lua, so two transactions
-- of one producer epoch never share it). Partitions added are also put in the registering set
-- ("<pid> <epoch> <txn_start_ms> <member>" -> now) until the pod that registers them on their
-- partitions has verified them (mapping/txn/transactions.py): a pod that died in between leaves
-- them there for the completer to release (txn_coord/tick.lua).
-- The previous transaction still PrepareCommit / PrepareAbort with this epoch: its EndTxn was
-- answered (a client adds nothing before), but Redis failed the pod's finish after the
-- outcome was persisted. Kafka answers CONCURRENT_TRANSACTIONS while its marker channel
-- finishes it; here nobody else is finishing an unclaimed one, so this caller claims it
-- ('finish': write the rest, then ask again); one claimed by another finisher
-- (lib/txn_coord.lua claim_prepare) is left to it for grace_ms, then claimed here.
-- Returns {error code, txn_start_ms, timeout_ms, per-member codes (verify only)...}, or
-- {CONCURRENT_TRANSACTIONS, -1, -1, 'finish'}.
local key = KEYS[1]
local pid, epoch, kind = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local grace_ms = tonumber(ARGV[4])
local FIRST_MEMBER = 5
local txn = txn_load(key)
if not txn or txn.producer_id ~= pid then
  return {K.INVALID_PRODUCER_ID_MAPPING, -1, -1}
end
if txn.epoch ~= epoch then
  return {K.PRODUCER_FENCED, -1, -1}
end
if is_prepare(txn.state) then
  local now = now_ms()
  if kind ~= 'verify' and (not prepare_claimed(key) or stale_prepare(txn, now, grace_ms)) then
    claim_prepare(key, txn, now)
    return {K.CONCURRENT_TRANSACTIONS, -1, -1, 'finish'}
  end
  return {K.CONCURRENT_TRANSACTIONS, -1, -1}
end
if kind == 'verify' then
  local reply = {K.NONE, txn.txn_start_ms, txn.timeout_ms}
  for i = FIRST_MEMBER, #ARGV do
    local added = txn.state == 'Ongoing' and redis.call('SISMEMBER', KEYS[2], ARGV[i]) == 1
    reply[#reply + 1] = added and K.NONE or K.TRANSACTION_ABORTABLE
  end
  return reply
end
local set = kind == 'groups' and KEYS[3] or KEYS[2]
if txn.state ~= 'Ongoing' then
  -- Empty, CompleteCommit, CompleteAbort: a new transaction
  redis.call('DEL', KEYS[2], KEYS[3])
  txn.state = 'Ongoing'
  txn.txn_start_ms = math.max(now_ms(), txn.txn_start_ms + 1)
  redis.call('HDEL', key, 'end_reason')
end
local now = now_ms()
local prefix = fmt(pid) .. ' ' .. int_text(epoch) .. ' ' .. int_text(txn.txn_start_ms) .. ' '
for i = FIRST_MEMBER, #ARGV do
  redis.call('SADD', set, ARGV[i])
  if kind == 'partitions' then
    redis.call('ZADD', KEYS[4], int_text(now), prefix .. ARGV[i])
  end
end
txn.last_update_ms = now
txn_save(key, txn)
return {K.NONE, txn.txn_start_ms, txn.timeout_ms}
