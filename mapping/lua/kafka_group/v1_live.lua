--! include lib/clock.lua
-- KEYS: v1_members
-- ARGV: v1_session_timeout_ms
-- How many V1 members of a (group, topic) are live (heartbeat within the V1 session timeout),
-- without changing anything: a Kafka join to that group name is refused while any is.
-- KEYS[1] the V1 group's members hash (consumer id -> last heartbeat ms).
-- ARGV[1] the V1 session timeout (ms).
local now, timeout, live = now_ms(), tonumber(ARGV[1]), 0
for _, heartbeat in ipairs(redis.call('HVALS', KEYS[1])) do
  if now - tonumber(heartbeat) <= timeout then live = live + 1 end
end
return live
