--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups
-- ARGV: producer_id, epoch, prepared_state
-- Every marker and group offset of the prepared transaction is written: PrepareCommit ->
-- CompleteCommit, PrepareAbort -> CompleteAbort; its partitions and groups are dropped. Only
-- when the transaction is still the one prepared (a second finisher changes nothing).
-- Returns 1 when this call completed it, else 0.
local key = KEYS[1]
local txn = txn_load(key)
if not txn or txn.producer_id ~= tonumber(ARGV[1]) or txn.epoch ~= tonumber(ARGV[2])
    or txn.state ~= ARGV[3] then
  return 0
end
txn.state = ARGV[3] == 'PrepareCommit' and 'CompleteCommit' or 'CompleteAbort'
txn.last_update_ms = now_ms()
txn_save(key, txn)
redis.call('HDEL', key, 'prepare_claimed')
redis.call('DEL', KEYS[2], KEYS[3])
return 1
