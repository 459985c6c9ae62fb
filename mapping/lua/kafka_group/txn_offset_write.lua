--! include lib/clock.lua
-- KEYS: offsets, offset_metadata, meta
-- ARGV: ...
-- A committed transaction's offsets of one (group, topic) become the committed offsets
-- (the store V1 shares, as kafka_group/offset_commit writes it: offset, metadata, leader
-- epoch), and the commit time its activity (meta's active_ms). No fence check: the
-- transactional commit was checked when it was stored (kafka_group/txn_offset_commit), and
-- EndTxn decides; the partitions' fences stay as they are. Writing the same values twice
-- is harmless (an EndTxn completed again after a pod died).
-- Per partition: partition, offset, metadata ('' none), leader epoch (negative: none).
-- Returns the write's time (ms, Redis' clock: the offsets mirror's record time).
local offsets, metadata, meta = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
for i = 1, #ARGV, 4 do
  local p = ARGV[i]
  redis.call('HSET', offsets, p, ARGV[i + 1])
  if ARGV[i + 2] == '' then
    redis.call('HDEL', metadata, p)
  else
    redis.call('HSET', metadata, p, ARGV[i + 2])
  end
  if tonumber(ARGV[i + 3]) < 0 then
    redis.call('HDEL', metadata, p .. '.leader_epoch')
  else
    redis.call('HSET', metadata, p .. '.leader_epoch', ARGV[i + 3])
  end
end
if #ARGV > 0 then redis.call('HSET', meta, 'active_ms', fmt(now)) end
return now
