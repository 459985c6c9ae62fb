--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, retention_ms, kafka_live
-- Offsets retention of one group: a group with no live member whose last activity (a
-- member's last heartbeat, a commit, a LEAVE: meta's active_ms) is older than ARGV[3] ms is
-- deleted, committed offsets included (Kafka's offsets.retention.minutes).  A group with
-- no recorded activity (written before active_ms existed) starts its clock now.  KEYS[5]:
-- the Kafka commit metadata (deleted with the offsets).  ARGV[4] = '1' while the group name
-- has live Kafka consumers (read by the caller from the Kafka group's slot): kept, and its
-- clock restarts, as Kafka keeps the offsets of a group with members.
-- Returns {1, the expiry time (ms, Redis' clock), the partitions that had an offset...}:
-- expired (deleted; the offsets mirror's tombstones: mapping/group/offsets_mirror.py), 0: kept,
-- 2: no such group (its groups-set entry is stale).
local retention_ms = tonumber(ARGV[3])
if redis.call('EXISTS', meta, members, assignment, offsets) == 0 then return 2 end
local now = now_ms()
if ARGV[4] == '1' then
  redis.call('HSET', meta, 'active_ms', fmt(now))
  return 0
end
local last = tonumber(redis.call('HGET', meta, 'active_ms'))
local flat = redis.call('HGETALL', members)
for i = 2, #flat, 2 do
  local heartbeat = tonumber(flat[i])
  if now - heartbeat <= session_timeout_ms then return 0 end
  if not last or heartbeat > last then last = heartbeat end
end
if not last then
  redis.call('HSET', meta, 'active_ms', fmt(now))
  return 0
end
if now - last <= retention_ms then return 0 end
local reply = {1, now}
for _, p in ipairs(redis.call('HKEYS', offsets)) do reply[#reply + 1] = p end
redis.call('DEL', meta, members, assignment, offsets, KEYS[5])
return reply
