-- Shared by the txn_coord/* scripts (the transaction coordinator, mapping/txn/transactions.py): the
-- transaction hash's fields, as Kafka's TransactionMetadata holds them.
--   transactional_id, producer_id, last_producer_id, epoch, last_epoch, state, timeout_ms,
--   txn_start_ms (-1: none), last_update_ms, prepare_claimed (see claim_prepare), end_reason
-- States are Kafka's TransactionState names. The callers' KEYS are state, partitions, groups.

--! include lib/clock.lua

local MAX_EPOCH = 32767  -- Short.MaxValue
-- Kafka's isProducerEpochExhausted: the next InitProducerId takes a new producer id.
local function epoch_exhausted(epoch)
  return epoch >= MAX_EPOCH - 1
end

local function txn_load(key)
  local raw = redis.call('HGETALL', key)
  if #raw == 0 then return nil end
  local t = {}
  for i = 1, #raw, 2 do t[raw[i]] = raw[i + 1] end
  return {
    producer_id = tonumber(t.producer_id),
    last_producer_id = tonumber(t.last_producer_id or '-1'),
    epoch = tonumber(t.epoch),
    last_epoch = tonumber(t.last_epoch or '-1'),
    state = t.state,
    timeout_ms = tonumber(t.timeout_ms),
    txn_start_ms = tonumber(t.txn_start_ms or '-1'),
    last_update_ms = tonumber(t.last_update_ms or '0'),
  }
end

local function txn_save(key, txn)
  redis.call('HSET', key,
    'producer_id', fmt(txn.producer_id), 'last_producer_id', fmt(txn.last_producer_id),
    'epoch', int_text(txn.epoch), 'last_epoch', int_text(txn.last_epoch),
    'state', txn.state, 'timeout_ms', int_text(txn.timeout_ms),
    'txn_start_ms', int_text(txn.txn_start_ms), 'last_update_ms', int_text(txn.last_update_ms))
end

local function is_prepare(state)
  return state == 'PrepareCommit' or state == 'PrepareAbort'
end

-- Prepare* left this long ago by the pod that wrote it: that pod is gone (or stuck), the
-- caller finishes the transaction (markers, then Complete*) itself.
local function stale_prepare(txn, now, grace_ms)
  return is_prepare(txn.state) and txn.last_update_ms + grace_ms <= now
end

-- A finisher takes a Prepare* over: the others leave it to that one for grace_ms (from
-- last_update_ms). The pod that prepared it in EndTxn holds no claim: it finishes before it
-- answers, so once its client sends anything else for the same epoch it has stopped (done,
-- or Redis failed it) and an unclaimed Prepare* may be taken over at once (txn_coord/add.lua).
local function claim_prepare(key, txn, now)
  txn.last_update_ms = now
  txn_save(key, txn)
  redis.call('HSET', key, 'prepare_claimed', '1')
end

local function prepare_claimed(key)
  return redis.call('HEXISTS', key, 'prepare_claimed') == 1
end
