-- Create a topic with the given defaults unless it exists; return its settings.
-- KEYS[1] = topic hash.  ARGV = partitions, replication_factor, min_insync_replicas,
-- [create: '0' only looks the topic up].
-- Returns {partitions, replication_factor, min_insync_replicas, created (0|1)}, or {} when
-- the topic does not exist and was not created.
--! include _clock.lua
local topic = KEYS[1]
local created = 0
if redis.call('EXISTS', topic) == 0 then
  if ARGV[4] == '0' then return {} end
  redis.call('HSET', topic,
    'partitions', ARGV[1],
    'replication_factor', ARGV[2],
    'min_insync_replicas', ARGV[3],
    'created_ms', fmt(now_ms()))
  created = 1
end
local v = redis.call('HMGET', topic, 'partitions', 'replication_factor', 'min_insync_replicas')
return {tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), created}
