--! include _partition.lua
-- Records at or after a position and at most the high watermark, oldest first.
-- ARGV[4] = start entry id, ARGV[5] = max records, ARGV[6] = max value bytes (0: no limit;
-- the first record is returned whatever its size).  Returns {hw, offset1, value1, ...}.
local log, state, hw_channel = KEYS[1], KEYS[2], KEYS[3]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])

local hw = refresh_hw(state, hw_channel, rf, lag_max_ms, now_ms())
local reply = {hw}
if hw < 0 then
  return reply
end
local entries = redis.call('XRANGE', log, ARGV[4], offset_id(hw, limit), 'COUNT', tonumber(ARGV[5]))
local max_bytes = tonumber(ARGV[6] or '0')
local total = 0
for _, entry in ipairs(entries) do
  local offset = id_offset(entry[1], limit)
  local fields = entry[2]
  local value = ''
  for j = 1, #fields, 2 do
    if fields[j] == 'value' then
      value = fields[j + 1]
      break
    end
  end
  total = total + #value
  if max_bytes > 0 and total > max_bytes and #reply > 1 then
    break
  end
  reply[#reply + 1] = offset
  reply[#reply + 1] = value
end
return reply
