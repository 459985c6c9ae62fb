--! include lib/clock.lua
-- KEYS: txn_offsets, txn_producers
-- ARGV: producer_id, producer_epoch, expiration_ms
-- EndTxn's first step on a group (commit or abort alike): the producer's pending
-- transactional offsets (see kafka_group/txn_offset_commit) of epochs up to ARGV[2], which
-- the caller then writes (commit: kafka_group/txn_offset_write, per topic) and removes
-- (kafka_group/txn_offset_clear, only those exact values: a commit of the producer's next
-- transaction stored meanwhile stays). Read only for the offsets, so a pod that dies
-- between the steps leaves them for the next EndTxn call (the coordinator's completer).
-- The producer's epoch seen here goes up to ARGV[2] (a zombie's later commit is refused);
-- an EndTxn of an older epoch than one seen answers nothing (stale: that transaction was
-- completed before the newer epoch began). Producers idle for ARGV[3] ms with nothing
-- pending are forgotten (Kafka's transactional.id.expiration.ms).
-- Returns {field, value, ...} of the pending offsets to complete.
local txn_offsets, txn_producers = KEYS[1], KEYS[2]
local producer_id, producer_epoch = ARGV[1], tonumber(ARGV[2])
local expiration_ms = tonumber(ARGV[3])
local now = now_ms()
local seen = redis.call('HGET', txn_producers, producer_id)
if seen and tonumber(string.match(seen, '^(%-?%d+)')) > producer_epoch then return {} end
redis.call('HSET', txn_producers, producer_id, ARGV[2] .. ' ' .. fmt(now))
local found, pending = {}, {}
local flat = redis.call('HGETALL', txn_offsets)
for i = 1, #flat, 2 do
  local owner = string.match(flat[i], '^(%d+) ')
  pending[owner] = true
  if owner == producer_id and tonumber(string.match(flat[i + 1], '^(%-?%d+) ')) <= producer_epoch then
    found[#found + 1] = flat[i]
    found[#found + 1] = flat[i + 1]
  end
end
local producers = redis.call('HGETALL', txn_producers)
for i = 1, #producers, 2 do
  local last = tonumber(string.match(producers[i + 1], ' (%d+)$') or '0')
  if not pending[producers[i]] and now - last > expiration_ms then
    redis.call('HDEL', txn_producers, producers[i])
  end
end
return found
