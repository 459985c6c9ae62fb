-- Create a topic with the given defaults unless it exists; return its settings.
-- KEYS[1] = topic hash.  ARGV = partitions, replication_factor, min_insync_replicas.
-- Returns {partitions, replication_factor, min_insync_replicas, created (0|1)}.
local topic = KEYS[1]
local created = 0
if redis.call('EXISTS', topic) == 0 then
  local t = redis.call('TIME')
  redis.call('HSET', topic,
    'partitions', ARGV[1],
    'replication_factor', ARGV[2],
    'min_insync_replicas', ARGV[3],
    'created_ms', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  created = 1
end
local v = redis.call('HMGET', topic, 'partitions', 'replication_factor', 'min_insync_replicas')
return {tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), created}
