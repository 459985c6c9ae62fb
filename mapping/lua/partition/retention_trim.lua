--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, segments, ...
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, retention_ms,
--   retention_bytes, floor, max_trim
-- Retention of one partition: trim its leader log (and follower replica streams) by time
-- and size, never at or above the high watermark, and never at or above `floor` (the
-- slowest committed group offset) when one is given.
-- By time it goes as Kafka's deleteRetentionMsBreachedSegments: whole segments whose
-- newest record is older than retention.ms and committed, oldest first, cut at a roll point
-- (the segments zset, kept by partition/segment_roll.lua); when every record is expired
-- and committed, the active segment rolls (the next record starts a new one) and all go.
-- By size (and below a group's floor) it trims record by record, as before.
-- KEYS = {log, state, hw_channel, appended, segments, replica 1, ..., replica RF-1}.
-- ARGV[4] = retention ms (-1: none), ARGV[5] = retention bytes (-1: none; measured with
-- MEMORY USAGE, an estimate), ARGV[6] = floor offset (-1: no floor), ARGV[7] = most entries
-- trimmed per call (the next run goes on).
-- Returns {entries trimmed from the log, first offset left in the log (-1: empty)}.
-- The state hash's `log_start` is one past the last record retention removed: offsets below
-- it are gone, and a reader whose next offset is below it lost records (the Spark source's
-- failOnDataLoss); a reader at or past it lost nothing, whatever the gaps before the next
-- record.
local log, state, segments = KEYS[1], KEYS[2], KEYS[5]
local limit = 2 ^ tonumber(ARGV[1])
local retention_ms, retention_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
local floor, max_trim = tonumber(ARGV[6]), tonumber(ARGV[7])

local hw = tonumber(redis.call('HGET', state, 'hw')) or -1
local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
if hw < 0 or #first == 0 then return {0, -1} end
local first_offset = id_offset(first[1][1], limit)

-- Trim entries with offset < cut.
local cut = -1
if retention_ms >= 0 then
  -- records below `expired` are older than retention.ms and committed
  local expired = (now_ms() - retention_ms) * limit
  if expired > hw + 1 then expired = hw + 1 end
  local live = redis.call('XRANGE', log, offset_id(expired, limit), '+', 'COUNT', 1)
  if #live == 0 then
    -- the active segment too: Kafka rolls it, then deletes every segment
    local log_end = tonumber(redis.call('HGET', state, 'log_end')) or hw
    redis.call('HSET', state, 'segment.start', fmt(log_end + 1), 'segment.scanned',
      fmt(log_end), 'segment.size', '0')
    cut = log_end + 1
  else
    -- the last roll point at or below the first live record: the segments below it hold
    -- only expired records
    local point = redis.call('ZREVRANGEBYSCORE', segments, fmt(id_offset(live[1][1], limit)),
      '-inf', 'LIMIT', 0, 1)
    if #point > 0 then cut = tonumber(point[1]) end
  end
end
if retention_bytes >= 0 then
  local used = redis.call('MEMORY', 'USAGE', log) or 0
  if used > retention_bytes then
    local len = redis.call('XLEN', log)
    local excess = len - math.floor(len * retention_bytes / used)
    if excess > max_trim then excess = max_trim end
    if excess > 0 then
      local old = redis.call('XRANGE', log, '-', '+', 'COUNT', excess)
      local size_cut = id_offset(old[#old][1], limit) + 1
      if size_cut > cut then cut = size_cut end
    end
  end
end
-- Only committed records (at most hw), and only what every group has consumed.
if cut > hw + 1 then cut = hw + 1 end
if floor >= 0 and cut > floor then cut = floor end
if cut <= first_offset then return {0, first_offset} end
-- Bound the work of one call.
local head = redis.call('XRANGE', log, '-', '+', 'COUNT', max_trim + 1)
if #head > max_trim then
  local bound = id_offset(head[max_trim + 1][1], limit)
  if cut > bound then cut = bound end
end

-- The last record this call removes (cut > first_offset: there is one).
local last_removed = redis.call('XREVRANGE', log, '(' .. offset_id(cut, limit), '-', 'COUNT', 1)
local trimmed = redis.call('XTRIM', log, 'MINID', offset_id(cut, limit))
trim_replicas(KEYS, 6, cut, limit)
local log_start = id_offset(last_removed[1][1], limit) + 1
local before = tonumber(redis.call('HGET', state, 'log_start')) or 0
if log_start > before then
  redis.call('HSET', state, 'log_start', fmt(log_start))
  publish_state(state, KEYS[3])  -- Fetch reports the log start
end
local kept = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
if #kept == 0 then return {trimmed, -1} end
return {trimmed, id_offset(kept[1][1], limit)}
