--! include lib/clock.lua
-- KEYS: index
-- ARGV: member, due_in_ms, revisit_ms
-- Before a transaction changes (mapping/transactions.py): make sure the completer looks at it
-- by now + due_in_ms (an earlier look is kept). A look already due may be in a completer's
-- hands right now: it is moved to now + revisit_ms, so that completer's settle (which
-- compares the score it saw) leaves it, and the id is looked at again with the new state.
local now = now_ms()
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
local due = now + tonumber(ARGV[2])
if not current then
  redis.call('ZADD', KEYS[1], int_text(due), ARGV[1])
elseif tonumber(current) <= now then
  redis.call('ZADD', KEYS[1], int_text(math.min(due, now + tonumber(ARGV[3]))), ARGV[1])
elseif due < tonumber(current) then
  redis.call('ZADD', KEYS[1], int_text(due), ARGV[1])
end
return 1
