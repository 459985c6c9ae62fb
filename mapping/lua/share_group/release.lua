-- KEYS: log
-- ARGV: consumer_group, member_id, lock_ms
-- Gives back everything a member holds on one share-partition, at once: the member left the
-- group, its session expired, or it closed its share session (Kafka releases a departing
-- member's acquired records).  Each entry it holds passes to no member (the consumer
-- RELEASED, not a member id: clients make theirs from UUIDs), so that the departed
-- member's late acknowledgements find nothing of theirs, its idle time
-- set past the lock so that the next acquisition claims it, its delivery count kept
-- (JUSTID).  The member's consumer is then deleted (it holds nothing any more).
-- Returns the number of entries released.
local log, cgroup, member, lock_ms = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local RELEASED = '(released by members that left the share group)'

if redis.call('EXISTS', log) == 0 then return 0 end
local ok, held = pcall(redis.call, 'XPENDING', log, cgroup, '-', '+', 1000000, member)
if not ok then return 0 end -- no such consumer group yet
local ids = {}
for _, p in ipairs(held) do ids[#ids + 1] = p[1] end
for i = 1, #ids, 500 do
  local page = {}
  for j = i, math.min(i + 499, #ids) do page[#page + 1] = ids[j] end
  page[#page + 1] = 'IDLE'
  page[#page + 1] = lock_ms + 1
  page[#page + 1] = 'JUSTID'
  redis.call('XCLAIM', log, cgroup, RELEASED, 0, unpack(page))
end
redis.call('XGROUP', 'DELCONSUMER', log, cgroup, member)
return #ids
