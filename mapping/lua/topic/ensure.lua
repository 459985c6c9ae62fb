--! include lib/clock.lua
-- KEYS: topic
-- ARGV: partitions, replication_factor, min_insync_replicas, create, topic_id
-- Create a topic with the given defaults unless it exists; return its settings.
-- KEYS[1] = topic hash.  ARGV = partitions, replication_factor, min_insync_replicas,
-- create ('0' only looks the topic up), topic id (a fresh random one from the caller: the id
-- a topic created now gets, and the id of a topic made by older code that has none yet).
-- The id is written with the topic, in this one call, and never changes while it exists: a
-- topic deleted and created again gets a new one (Kafka clients tell the two apart by it).
-- Returns {partitions, replication_factor, min_insync_replicas, created (0|1), topic id,
-- id given now to an existing topic (0|1), the whole hash (field, value, ...: the topic's
-- configs among them)}, or {} when the topic does not exist and was not created.
local topic = KEYS[1]
local created, assigned = 0, 0
if redis.call('EXISTS', topic) == 0 then
  if ARGV[4] == '0' then return {} end
  redis.call('HSET', topic,
    'partitions', ARGV[1],
    'replication_factor', ARGV[2],
    'min_insync_replicas', ARGV[3],
    'created_ms', fmt(now_ms()),
    'topic_id', ARGV[5])
  created = 1
else
  assigned = redis.call('HSETNX', topic, 'topic_id', ARGV[5])
end
local v = redis.call('HMGET', topic, 'partitions', 'replication_factor', 'min_insync_replicas',
  'topic_id')
return {tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), created, v[4], assigned,
  redis.call('HGETALL', topic)}
