--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups
-- ARGV: grace_ms, expiration_ms
-- The completer's look at one transactional id whose time came (mapping/txn_completer.py):
--   Ongoing past txn_start_ms + timeout_ms: fenced (epoch bumped, as Kafka's
--     abortTimedOutTransactions) and PrepareAbort -> 'finish';
--   Prepare* older than grace_ms (its pod died mid-EndTxn): claimed -> 'finish';
--   Empty / Complete* not used for expiration_ms (transactional.id.expiration.ms): deleted
--     -> 'gone';
--   no such id -> 'gone'; else '' and when to look again.
-- Returns {action, next look (ms, -1 with 'gone')}.
local key = KEYS[1]
local grace_ms, expiration_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local txn = txn_load(key)
if not txn then return {'gone', -1} end
local now = now_ms()
if txn.state == 'Ongoing' then
  local deadline = txn.txn_start_ms + txn.timeout_ms
  if deadline > now then return {'', deadline} end
  txn.epoch = txn.epoch + 1
  txn.last_epoch = -1
  txn.state = 'PrepareAbort'
  txn.last_update_ms = now
  txn_save(key, txn)
  redis.call('HSET', key, 'end_reason', 'timeout')
  return {'finish', now + grace_ms}
end
if is_prepare(txn.state) then
  if not stale_prepare(txn, now, grace_ms) then return {'', txn.last_update_ms + grace_ms} end
  txn.last_update_ms = now
  txn_save(key, txn)
  return {'finish', now + grace_ms}
end
local expiry = txn.last_update_ms + expiration_ms
if expiry > now then return {'', expiry} end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {'gone', -1}
