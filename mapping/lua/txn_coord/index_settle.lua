-- KEYS: index
-- ARGV: member, seen_score, next_ms
-- The completer looked at a transactional id it found due at seen_score: the next look at
-- next_ms (-1: the id is gone, drop it), unless a request moved the look meanwhile
-- (txn_coord/index_touch.lua): then that one stands.
-- Returns 1 when settled, 0 when left.
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) ~= tonumber(ARGV[2]) then return 0 end
if tonumber(ARGV[3]) < 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
