--! include lib/clock.lua
-- KEYS: offsets, meta, offset_metadata
-- ARGV: partition1, next_offset1, ...
-- A Spark job's progress into a group's committed offsets, only ever moving forward, so a
-- re-run micro-batch (same data after a failure) or a late writer cannot move it back.
-- KEYS[1] = the group's offsets hash, [KEYS[2] = its meta hash: the commit time is stored
-- as active_ms, so offsets retention counts from it], [KEYS[3] = its Kafka commit metadata
-- hash: a moved partition's metadata and leader epoch go, a Spark commit has neither].
-- ARGV = partition1, next_offset1, partition2, ...
-- Returns the stored value per partition after the update, as strings.
-- Offsets are exact as Lua numbers (below 2^53, see mapping/core/codec.py).
local offsets = KEYS[1]
-- Validate everything first: a script is not rolled back when it fails half-way.
for i = 1, #ARGV, 2 do
  if not string.match(ARGV[i], '^%d+$') or not string.match(ARGV[i + 1] or '', '^%d+$') then
    return redis.error_reply(K.V1_BAD_REQUEST .. ' invalid offset')
  end
end
if KEYS[2] then
  redis.call('HSET', KEYS[2], 'active_ms', fmt(now_ms()))
end
local stored = {}
for i = 1, #ARGV, 2 do
  local field, wanted = ARGV[i], ARGV[i + 1]
  local current = redis.call('HGET', offsets, field)
  if not current or tonumber(wanted) > tonumber(current) then
    redis.call('HSET', offsets, field, wanted)
    if KEYS[3] then
      redis.call('HDEL', KEYS[3], field, field .. '.leader_epoch')
    end
    current = wanted
  end
  stored[#stored + 1] = current
end
return stored
