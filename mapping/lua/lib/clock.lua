-- Shared by the partition and group helpers: Redis' clock and exact number text.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- All digits: Lua's default number format would round large values (offsets, ms times).
local function fmt(n)
  return string.format('%.0f', n)
end

-- The same for an integer known to be below 2^53 (ms times, counts, sequence numbers):
-- C's integer formatting, where '%.0f' (and Redis' own conversion of a Lua number given to
-- redis.call) take printf's float path, about 20 times the instructions; an append formats
-- several numbers per record.
local function int_text(n)
  return string.format('%d', n)
end
