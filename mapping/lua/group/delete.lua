--! include lib/group.lua
-- KEYS: meta, members, assignment, offsets, offset_metadata
-- ARGV: session_timeout_ms, partition_count, force
-- Delete a group (of one topic): its meta, members, assignment and committed offsets (with
-- the Kafka commit metadata beside them, KEYS[5]).
-- ARGV[3] = force ('1': even with live members).  A group with a member whose session has
-- not run out is refused (as Kafka's DeleteGroups answers NON_EMPTY_GROUP) unless forced;
-- a forced delete's members get "group not found" on their next call and JOIN again.
-- Returns {1, the deletion time (ms, Redis' clock), the partitions that had an offset...}
-- when deleted (the offsets mirror's tombstones: mapping/group/offsets_mirror.py), 0 when there
-- was no such group.
local force = ARGV[3] == '1'
if redis.call('EXISTS', meta, members, assignment, offsets) == 0 then return 0 end
local now = now_ms()
if not force then
  local flat = redis.call('HGETALL', members)
  local live = 0
  for i = 1, #flat, 2 do
    if now - tonumber(flat[i + 1]) <= session_timeout_ms then live = live + 1 end
  end
  if live > 0 then
    return redis.error_reply(K.V1_NON_EMPTY_GROUP .. ' the group has ' .. live .. ' live member(s)')
  end
end
local reply = {1, now}
for _, p in ipairs(redis.call('HKEYS', offsets)) do reply[#reply + 1] = p end
redis.call('DEL', meta, members, assignment, offsets, KEYS[5])
return reply
