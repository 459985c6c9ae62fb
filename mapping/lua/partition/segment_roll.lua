--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, segments
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, roll_ms, segment_bytes,
--   jitter_ms, keep_roll_points, max_records, max_bytes, bytes_from
-- The partition's segments (docs/compaction.md, "Segments"), found after the fact: Kafka
-- rolls the active segment when a record arrives and the segment's first record is older
-- than roll_ms (segment.ms, or max.compaction.lag.ms when smaller on a compacted topic) less
-- the segment's jitter, or the record would take the segment past segment.bytes. Offsets
-- encode append times, so the same rule read over the log in offset order gives the same
-- roll points; this step reads on from where the last one stopped, at most max_records
-- records or max_bytes bytes, and keeps in the state hash
--   'segment.start'    the active segment's first offset (the last roll point found);
--   'segment.scanned'  the last offset read (absent: none of the active segment yet);
--   'segment.size'     bytes of the active segment's records up to it (a record's bytes:
--                      the lengths of its entry's field names and values).
-- The appends do none of this: what is not read yet belongs to the active segment, so a
-- step behind the log end only makes compaction and retention do less, never more.
-- Reading every record costs Redis about twice a plain XADD per record, so a topic whose
-- segment.bytes is at least ARGV[10] (Kafka's default, 1 GiB) rolls by time alone and reads
-- no record: the next roll point is the first record past the active segment's deadline,
-- one XRANGE ... COUNT 1 per segment (records read: 0; 'segment.scanned' and
-- 'segment.size' are then left out). Only a topic that lowered segment.bytes pays the read.
-- With keep_roll_points = '1' (topics with time retention) each roll point also goes to the
-- segments zset (offset -> offset), where partition/retention_trim.lua finds the segment
-- boundaries; points below the log start leave it (a topic that no longer keeps them
-- leaves those it kept to retention or the topic's deletion).
-- A segment's jitter is Kafka's random 0 <= j < min(segment.jitter.ms, roll_ms), drawn
-- here from the partition and the segment's first offset, so every step draws the same.
-- Returns {active segment's first offset, records read, done (1: read to the log end)}.
local log, state, segments = KEYS[1], KEYS[2], KEYS[5]
local limit = 2 ^ tonumber(ARGV[1])
local roll_ms, segment_bytes, jitter_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local keep_points = ARGV[7] == '1'
local max_records, max_bytes = tonumber(ARGV[8]), tonumber(ARGV[9])
local by_bytes = segment_bytes < tonumber(ARGV[10])
local gone = deleted_reply(state)
if gone then return gone end

local known = redis.call('HMGET', state, 'segment.start', 'segment.scanned', 'segment.size',
  'log_start')
local start = tonumber(known[1]) or 0
local scanned = tonumber(known[2])
local size = tonumber(known[3]) or 0
local log_start = tonumber(known[4]) or 0
if log_start > 0 then
  redis.call('ZREMRANGEBYSCORE', segments, '-inf', '(' .. fmt(log_start))
end
if start < log_start then
  -- retention by size or DeleteRecords removed the active segment's first records: it
  -- starts at what is left (Kafka keeps the segment file; only its first offsets go)
  start, scanned, size = log_start, nil, 0
end

local function jitter(base)
  if jitter_ms <= 0 then return 0 end
  local span = jitter_ms < roll_ms and jitter_ms or roll_ms
  return tonumber(string.sub(redis.sha1hex(state .. ' ' .. fmt(base)), 1, 12), 16) % span
end

-- the active segment's first record: its time starts the segment's clock
local first = redis.call('XRANGE', log, offset_id(start, limit), '+', 'COUNT', 1)
if #first == 0 then
  redis.call('HSET', state, 'segment.start', fmt(start))
  return {start, 0, 1}
end
if not scanned or not by_bytes then start = id_offset(first[1][1], limit) end
local first_ms = math.floor(start / limit)
local roll_after = roll_ms - jitter(start)

if not by_bytes then
  -- by time alone: each roll point is the first record past the segment's deadline
  local rolls = 0
  while rolls < max_records do
    local past = redis.call('XRANGE', log, offset_id((first_ms + roll_after + 1) * limit, limit),
      '+', 'COUNT', 1)
    if #past == 0 then break end
    start = id_offset(past[1][1], limit)
    first_ms = math.floor(start / limit)
    roll_after = roll_ms - jitter(start)
    if keep_points then redis.call('ZADD', segments, fmt(start), fmt(start)) end
    rolls = rolls + 1
  end
  redis.call('HSET', state, 'segment.start', fmt(start))
  redis.call('HDEL', state, 'segment.scanned', 'segment.size')
  return {start, 0, rolls < max_records and 1 or 0}
end

local from = scanned and '(' .. offset_id(scanned, limit) or offset_id(start, limit)
local read, bytes_read, done = 0, 0, false
while not done and read < max_records and bytes_read < max_bytes do
  local page = max_records - read
  if page > 64 then page = 64 end
  local entries = redis.call('XRANGE', log, from, '+', 'COUNT', page)
  if #entries < page then done = true end
  for _, entry in ipairs(entries) do
    local offset = id_offset(entry[1], limit)
    local record_bytes = 0
    for _, part in ipairs(entry[2]) do record_bytes = record_bytes + #part end
    local ms = math.floor(offset / limit)
    if offset > start and (ms - first_ms > roll_after or size + record_bytes > segment_bytes) then
      start, first_ms, size = offset, ms, 0
      roll_after = roll_ms - jitter(start)
      if keep_points then redis.call('ZADD', segments, fmt(start), fmt(start)) end
    end
    size = size + record_bytes
    scanned = offset
    read = read + 1
    bytes_read = bytes_read + record_bytes
    from = '(' .. entry[1]
  end
end
local fields = {'segment.start', fmt(start), 'segment.size', fmt(size)}
if scanned then
  fields[#fields + 1] = 'segment.scanned'
  fields[#fields + 1] = fmt(scanned)
end
redis.call('HSET', state, unpack(fields))
if not scanned then redis.call('HDEL', state, 'segment.scanned') end
return {start, read, done and 1 or 0}
