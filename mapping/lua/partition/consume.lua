--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, start_id, max_records, max_bytes,
--   [durable]
-- CONSUME: records at or after a position and at most the high watermark, oldest first,
-- within a byte budget enforced here, where the data is read: the log is paged with XRANGE
-- and reading stops once the values reach the budget, so neither Redis nor the pod ever
-- holds more than about the budget (one XRANGE ... COUNT max_records of 1 MiB values would
-- copy them all).
-- Copying entries through Lua costs Redis far more than a native XRANGE (about 15x for small
-- values), so a pod reads with a native XRANGE counted from the size marks (see
-- lib/partition.lua) and calls this to read only where the marks allow just a few records (a
-- few large values, which cost Lua little more than XRANGE's own copy) or say nothing
-- (records written before marks); with max records 0, for hw and the marks.
-- ARGV[4] = start entry id, ARGV[5] = max records (0: none, only hw and the marks),
-- ARGV[6] = max value bytes (0: no limit; the first record comes whatever its size, so a
-- consumer always makes progress), ARGV[7] = '1': hw only up to durable_hw (readable_hw).
-- Transactions: the hw answered is at most the last stable offset - 1 (the last entry before
-- the oldest open transaction: reader_bounds, mapping/partition/partition_txns.py), so V1 never reads a
-- record of an open transaction.
-- Returns {hw, marks, entry1, entry2, ...}: marks as size_marks() gives them, each entry as
-- XRANGE gives it, {id, {field, value, ...}} (passed through, not rebuilt: the pod decodes
-- them as it would XRANGE's).
local log, state, hw_channel = KEYS[1], KEYS[2], KEYS[3]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local gone = deleted_reply(state)
if gone then return gone end
local max_records = tonumber(ARGV[5])
local max_bytes = tonumber(ARGV[6] or '0')
-- A page is at most this many times the records read so far: the size seen so far guides
-- the next page, and a tiny first record cannot make the next page a thousand huge ones.
local GROWTH = 8

local hw = readable_hw(state, (refresh_hw(state, hw_channel, rf, lag_max_ms, now_ms())), ARGV[7])
local stable_end
hw, stable_end = reader_bounds(log, state, hw, tonumber(redis.call('HGET', state, 'log_end')) or -1,
  limit)
if stable_end >= 0 then hw = stable_end - 1 end
local reply = {hw, size_marks(state)}
if hw < 0 or max_records <= 0 then
  return reply
end
local last = offset_id(hw, limit)

if max_bytes <= 0 then
  local entries = redis.call('XRANGE', log, ARGV[4], last, 'COUNT', max_records)
  for i = 1, #entries do
    reply[i + 2] = entries[i]
  end
  return reply
end

-- (mapping/core/records.py owns the field names)
local function value_size(fields)
  if fields[3] == 'value' then  -- as partition/produce.lua writes them: key, value, ts
    return #fields[4]
  end
  for j = 1, #fields - 1, 2 do
    if fields[j] == 'value' then
      return #fields[j + 1]
    end
  end
  return 0
end

local start = ARGV[4]
local count, total = 0, 0
local page = 1  -- its size tells how many the budget holds
while true do
  local entries = redis.call('XRANGE', log, start, last, 'COUNT', page)
  for i = 1, #entries do
    local size = value_size(entries[i][2])
    if count > 0 and total + size > max_bytes then
      return reply
    end
    count, total = count + 1, total + size
    reply[count + 2] = entries[i]
  end
  if #entries < page or count >= max_records or total >= max_bytes then
    return reply
  end
  start = '(' .. entries[#entries][1]
  local fits = max_records - count
  if total > 0 then  -- as many as the bytes left hold at the mean size so far
    fits = math.min(fits, math.ceil((max_bytes - total) * count / total))
  end
  page = math.max(1, math.min(fits, count * GROWTH))
end
