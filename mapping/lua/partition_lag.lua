--! include _partition.lua
-- A group's lag on one partition, read-only: records from the committed position up to the
-- high watermark, counted in Redis (no entries leave it), at most ARGV[5] of them.
-- ARGV[4] = committed position as a stream id ("ms-seq"), ARGV[5] = count cap.
-- Returns {hw, records (capped), first offset still in the log (-1: empty)}.
local log, state = KEYS[1], KEYS[2]
local limit = 2 ^ tonumber(ARGV[1])
local cap = tonumber(ARGV[5])
local hw = tonumber(redis.call('HGET', state, 'hw')) or -1
local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
local first_offset = -1
if #first > 0 then first_offset = id_offset(first[1][1], limit) end
if hw < 0 then return {hw, 0, first_offset} end
local entries = redis.call('XRANGE', log, ARGV[4], offset_id(hw, limit), 'COUNT', cap)
return {hw, #entries, first_offset}
