-- KEYS: topic
-- ARGV: partitions
-- Grow a topic's partition count (Kafka CreatePartitions, `adapter topic alter --partitions`).
-- Partitions are only ever added, so a pod that still has the old count cached only writes
-- into partitions that exist; it hears of the growth on the topics:changed channel.
-- KEYS[1] = topic hash.  ARGV[1] = the new count.
-- Returns the count before: -1 when the topic does not exist. The count is set only when
-- ARGV[1] is above it (the caller refuses the rest).
local topic = KEYS[1]
if redis.call('EXISTS', topic) == 0 then return -1 end
local before = tonumber(redis.call('HGET', topic, 'partitions'))
local after = tonumber(ARGV[1])
if after > before then
  redis.call('HSET', topic, 'partitions', after)
end
return before
