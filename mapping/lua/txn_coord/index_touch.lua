--! include lib/clock.lua
-- KEYS: index
-- ARGV: member, due_in_ms, revisit_ms
-- Before a transaction changes (mapping/txn/transactions.py): make sure the completer looks at it
-- by now + due_in_ms (an earlier look is kept). A look already due may be in a completer's
-- hands right now: its score changes (to now + revisit_ms at most, and always above the one
-- it had), so that completer's settle (which compares the score it saw) leaves it and the id
-- is looked at again with the new state. With revisit_ms 0 a due look stays due however
-- often a producer retries (each retry touches it): retries never put the completer off.
local now = now_ms()
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
local due = now + tonumber(ARGV[2])
if not current then
  redis.call('ZADD', KEYS[1], int_text(due), ARGV[1])
elseif tonumber(current) <= now then
  local moved = math.max(math.min(due, now + tonumber(ARGV[3])), tonumber(current) + 1)
  redis.call('ZADD', KEYS[1], int_text(moved), ARGV[1])
elseif due < tonumber(current) then
  redis.call('ZADD', KEYS[1], int_text(due), ARGV[1])
end
return 1
