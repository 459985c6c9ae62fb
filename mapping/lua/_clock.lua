-- Shared by the partition and group helpers: Redis' clock and exact number text.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- All digits: Lua's default number format would round large values (offsets, ms times).
local function fmt(n)
  return string.format('%.0f', n)
end
