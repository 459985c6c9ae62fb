-- KEYS: log
-- ARGV: consumer_group, max_counted
-- DescribeShareGroupOffsets on one share-partition: the state of the Redis consumer group
-- ARGV[1] of the partition's log stream, read in one step.  The records not yet delivered
-- are XINFO GROUPS' lag (Redis 7); where Redis cannot tell (entries deleted after the
-- group's position, or a position set by hand), they are counted, at most ARGV[2] (beyond:
-- -1, unknown).
-- Returns {} when the stream or the group does not exist (the share-partition is not
-- initialised), else {last delivered id, records in flight (the PEL's size), the first
-- PEL entry's id or '', records not yet delivered or -1}.
local log, cgroup, max_counted = KEYS[1], ARGV[1], tonumber(ARGV[2])

if redis.call('EXISTS', log) == 0 then return {} end
local found
for _, info in ipairs(redis.call('XINFO', 'GROUPS', log)) do
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if fields['name'] == cgroup then
    found = fields
    break
  end
end
if not found then return {} end

local last_id = found['last-delivered-id']
local pending = tonumber(found['pending'])
local first_pending = ''
if pending > 0 then
  local summary = redis.call('XPENDING', log, cgroup)
  first_pending = summary[2]
end

local undelivered = -1
local lag = found['lag']
if type(lag) == 'number' then
  undelivered = lag
else
  local counted, cursor = 0, '(' .. last_id
  while true do
    local page = redis.call('XRANGE', log, cursor, '+', 'COUNT', 1000)
    counted = counted + #page
    if #page < 1000 then
      undelivered = counted
      break
    end
    if counted >= max_counted then break end
    cursor = '(' .. page[#page][1]
  end
end
return {last_id, pending, first_pending, undelivered}
