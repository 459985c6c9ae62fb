-- KEYS: txn_offsets
-- ARGV: ...
-- EndTxn's last step on a group: remove pending transactional offsets, each only while it
-- still holds the value EndTxn completed (kafka_group/txn_offset_end's answer), so a newer
-- commit of the same producer and partition is kept. ARGV: field, value, ...
-- Returns how many were removed.
local removed = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    removed = removed + 1
  end
end
return removed
