-- KEYS: log
-- ARGV: consumer_group, max_counted
-- DescribeShareGroupOffsets on one share-partition: the state of the Redis consumer group
-- ARGV[1] of the partition's log stream, read in one step.  The records not yet delivered
-- are XINFO GROUPS' lag (Redis 7); where Redis cannot tell (entries deleted after the
-- group's position, or a position set by hand), they are counted, at most ARGV[2] (beyond:
-- -1, unknown).
-- Retention may have deleted entries the group never read, or entries still in its PEL
-- (retention wins, as in Kafka; the next acquisition drops them from the PEL): XINFO's lag
-- still counts the first (its entries-read never learns of them): so a group at the log's
-- end has nothing undelivered, a log that now starts after the last delivered id has every
-- entry left undelivered (XLEN), and only a group in the middle of its log takes Redis'
-- lag (at most XLEN; too high by the entries deleted unread until the group reads past the
-- log's end once).  PEL entries below the log's first id are not counted in flight (at most
-- ARGV[2] of them are looked at).
-- Returns {} when the stream or the group does not exist (the share-partition is not
-- initialised), else {last delivered id, records in flight (the PEL's size), the first
-- PEL entry's id or '', records not yet delivered or -1}.
local log, cgroup, max_counted = KEYS[1], ARGV[1], tonumber(ARGV[2])

local function id_below(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, b_ms = tonumber(a_ms), tonumber(b_ms)
  return a_ms < b_ms or (a_ms == b_ms and tonumber(a_seq) < tonumber(b_seq))
end

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
local head = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
local first_id = head[1] and head[1][1] or nil
local tail = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
local end_id = tail[1] and tail[1][1] or nil
local pending = tonumber(found['pending'])
local first_pending = ''
if pending > 0 then
  local summary = redis.call('XPENDING', log, cgroup)
  first_pending = summary[2]
  if first_id == nil then
    pending, first_pending = 0, ''
  elseif id_below(first_pending, first_id) then -- some were deleted by retention
    local kept = redis.call('XPENDING', log, cgroup, first_id, '+', max_counted)
    pending, first_pending = #kept, kept[1] and kept[1][1] or ''
  end
end

local undelivered = -1
local lag = found['lag']
if first_id == nil or not id_below(last_id, end_id) then -- nothing after the group
  undelivered = 0
elseif id_below(last_id, first_id) then -- the log starts after the last delivered id
  undelivered = redis.call('XLEN', log)
elseif type(lag) == 'number' then
  undelivered = math.min(lag, redis.call('XLEN', log))
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
