-- KEYS: topic
-- ARGV: topic_id
-- The last step of a topic's deletion (mapping/admin.py delete_topic): its hash goes, unless
-- it is another topic by now (created again under the same name: another id).
-- KEYS[1] = topic hash.  ARGV[1] = the id of the topic being deleted ('' : whatever it is).
-- Returns the partition count the topic had at this moment (it may have grown since the
-- deletion read it: those partitions need tombstones too), -1 when there is no topic hash,
-- -2 when the hash holds another topic (left as it is).
local topic = KEYS[1]
if redis.call('EXISTS', topic) == 0 then return -1 end
local v = redis.call('HMGET', topic, 'partitions', 'topic_id')
if ARGV[1] ~= '' and v[2] and v[2] ~= ARGV[1] then return -2 end
redis.call('DEL', topic)
return tonumber(v[1]) or 0
