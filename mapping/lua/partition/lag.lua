--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, committed_id, count_cap
-- A group's lag on one partition, read-only: records from the committed position up to the
-- high watermark. partition/produce.lua numbers every entry (field 'n': records ever appended
-- to the partition, 1 for the first), so the lag is n(last entry <= hw) - n(first entry >=
-- committed) + 1: two entries are read however long the backlog (retention trims from the
-- head and nothing deletes inside a log, so the numbers between two entries count exactly the
-- records between them). Entries written before numbering (no 'n') are counted one by one,
-- at most ARGV[5] of them, and the lag is then "at least" that.
-- ARGV[4] = committed position as a stream id ("ms-seq"), ARGV[5] = count cap for unnumbered.
-- Returns {hw, lag, first offset still in the log (-1: empty), 1 when the lag is exact
-- (0: the count stopped at ARGV[5])}.
local log, state = KEYS[1], KEYS[2]
local limit = 2 ^ tonumber(ARGV[1])
local hw = tonumber(redis.call('HGET', state, 'hw')) or -1
local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
local first_offset = -1
if #first > 0 then first_offset = id_offset(first[1][1], limit) end
if hw < 0 then return {hw, 0, first_offset, 1} end

local function number_of(entry)
  local fields = entry[2]
  for j = #fields - 1, 1, -2 do  -- 'n' is written last (mapping/core/records.py owns the names)
    if fields[j] == 'n' then return tonumber(fields[j + 1]) end
  end
  return nil
end

local last = offset_id(hw, limit)
local from = redis.call('XRANGE', log, ARGV[4], last, 'COUNT', 1)
if #from == 0 then return {hw, 0, first_offset, 1} end
local to = redis.call('XREVRANGE', log, last, ARGV[4], 'COUNT', 1)
local low, high = number_of(from[1]), number_of(to[1])
if low and high then return {hw, high - low + 1, first_offset, 1} end
local cap = tonumber(ARGV[5])
local entries = redis.call('XRANGE', log, ARGV[4], last, 'COUNT', cap)
return {hw, #entries, first_offset, #entries < cap and 1 or 0}
