--! include _partition.lua
-- Append records to a partition's leader log with ids assigned here: ms = max(now, last ms),
-- seq = last seq + 1 on the same ms, rolling to the next ms when seq would reach 2^B, so
-- offsets strictly increase and never collide.
-- ARGV[4..]: key1, value1, key2, value2, ...   Returns {hw, ISR size, offset1, offset2, ...}:
-- acks=all is answered from the reply itself when hw and the ISR already allow it.
-- When a follower had everything before this append, the new log end is PUBLISHed on the
-- partition's appended channel (KEYS[4]): that wakes the idle replicator owning it.  A
-- follower still behind needs no wake-up (its replicator is busy copying), so a busy
-- partition publishes rarely.
local log, state, hw_channel, appended = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])

if is_follower(state) then
  return redis.error_reply('NOT_LEADER partition is a follower')
end

local now = now_ms()
local log_end = tonumber(redis.call('HGET', state, 'log_end')) or -1
local ms, seq = -1, limit - 1
if log_end >= 0 then
  ms = math.floor(log_end / limit)
  seq = log_end - ms * limit
end

-- Followers that had everything before this append were caught up until now.
local wake = false
for r = 1, rf - 1 do
  local acked = tonumber(redis.call('HGET', state, replica_field(r, 'acked_offset'))) or -1
  if acked >= log_end then
    redis.call('HSET', state, replica_field(r, 'caught_up_ms'), now)
    wake = true
  end
end

local offsets = {0, 0}
for i = 4, #ARGV, 2 do
  if now > ms then
    ms, seq = now, 0
  elseif seq + 1 < limit then
    seq = seq + 1
  else
    ms, seq = ms + 1, 0
  end
  redis.call('XADD', log, fmt(ms) .. '-' .. fmt(seq), 'key', ARGV[i], 'value', ARGV[i + 1], 'ts', now)
  offsets[#offsets + 1] = ms * limit + seq
end
redis.call('HSET', state, 'log_end', fmt(ms * limit + seq))
if wake then
  redis.call('PUBLISH', appended, fmt(ms * limit + seq))
end
local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
offsets[1], offsets[2] = hw, #isr
return offsets
