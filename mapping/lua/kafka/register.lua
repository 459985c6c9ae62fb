--! include lib/clock.lua
-- KEYS: live, pods, ids, next_id
-- ARGV: pod_id, address, ttl_ms
-- Register (or refresh) one pod as a Kafka broker and drop expired registrations.
-- KEYS = {live (zset pod -> expiry ms), pods (hash pod -> address), ids (hash address ->
-- node id), next_id}.  ARGV = pod id, advertised HOST:PORT, ttl ms.
-- Pods advertising one address share its node id: they are one broker to clients.
-- Returns the node id.
local live, pods, ids, next_id = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pod, address, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', live, '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('HDEL', pods, gone)
end
redis.call('ZREMRANGEBYSCORE', live, '-inf', now)
redis.call('ZADD', live, now + ttl, pod)
redis.call('HSET', pods, pod, address)
local id = redis.call('HGET', ids, address)
if not id then
  id = redis.call('INCR', next_id)
  redis.call('HSET', ids, address, id)
end
return tonumber(id)
