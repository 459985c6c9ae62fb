--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, [durable]
-- The partition's replication state now (ISR re-evaluated at the current time).
-- ARGV[4] = '1': a reader's hw, at most durable_hw (readable_hw in lib/partition.lua).
-- Returns {hw, isr_size, next_change_ms, log_end, isr ("0 1 2"), role, stable_end}: hw as
-- readers reach it and stable_end the last stable offset while a transaction is open (-1:
-- none open; the last stable offset is then hw + 1): reader_bounds in lib/partition.lua.
local log, state, hw_channel = KEYS[1], KEYS[2], KEYS[3]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local gone = deleted_reply(state)
if gone then return gone end
local hw, isr, next_change = refresh_hw(state, hw_channel, rf, lag_max_ms, now_ms())
hw = readable_hw(state, hw, ARGV[4])
local v = redis.call('HMGET', state, 'log_end', 'role')
local log_end = tonumber(v[1]) or -1
local stable_end
hw, stable_end = reader_bounds(log, state, hw, log_end, limit)
return {hw, #isr, next_change, log_end, table.concat(isr, ' '), v[2] or 'leader', stable_end}
