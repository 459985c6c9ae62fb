--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, index, dirty, tombstones
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, max_fields
-- Sweeps, in one bounded step, the compaction index of records retention or DeleteRecords
-- trimmed (docs/compaction.md): a key whose latest record is gone leaves the index (so the
-- index of a compact,delete topic does not grow with every key ever written), and dirty or
-- tombstone entries below the log start leave their sets.  A pass is an HSCAN of the index,
-- its cursor kept in the state hash ('compact.sweep'); a pass starts only when the log start
-- ('log_start': one past what retention or DeleteRecords removed, never moved by compaction)
-- moved past where the last pass started ('compact.swept'), so a log nothing trimmed costs
-- one HMGET per run.  ARGV[4] = HSCAN COUNT of this call.
-- Returns {index entries removed, done (1: no pass under way), set entries removed}.
local state = KEYS[2]
local index, dirty, tombstones = KEYS[5], KEYS[6], KEYS[7]
local limit = 2 ^ tonumber(ARGV[1])
local max_fields = tonumber(ARGV[4])
local gone = deleted_reply(state)
if gone then return gone end

local known = redis.call('HMGET', state, 'compact.sweep', 'compact.swept', 'log_start')
local cursor, swept = known[1], tonumber(known[2]) or 0
local first = tonumber(known[3]) or 0  -- records below it were trimmed
if not cursor then
  if first <= swept then return {0, 1, 0} end
  cursor = '0'
  redis.call('HSET', state, 'compact.swept', fmt(first))
end

local below = '(' .. fmt(first)
local set_removed = redis.call('ZREMRANGEBYSCORE', tombstones, '-inf', below)
-- a dirty entry's score is its superseding record's offset: both are gone
set_removed = set_removed + redis.call('ZREMRANGEBYSCORE', dirty, '-inf', below)

local page = redis.call('HSCAN', index, cursor, 'COUNT', max_fields)
local stale = {}
local fields = page[2]
for j = 1, #fields - 1, 2 do
  if id_offset(fields[j + 1], limit) < first then stale[#stale + 1] = fields[j] end
end
if #stale > 0 then redis.call('HDEL', index, unpack(stale)) end
if page[1] == '0' then
  redis.call('HDEL', state, 'compact.sweep')
  return {#stale, 1, set_removed}
end
redis.call('HSET', state, 'compact.sweep', page[1])
return {#stale, 0, set_removed}
