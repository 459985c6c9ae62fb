--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, index, dirty, tombstones
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, max_entries
-- The compaction index's cursor (docs/compaction.md, "Changing the policy"): indexes, in one
-- bounded step, records the appends did not index: those written before the topic became
-- compacted, and those a pod with a stale config appended without the compaction keys.
-- The state hash's 'compact.indexed' is the offset up to which every record is indexed
-- (absent: none is, on a log that has records); an append that finds it at the log end
-- moves it on (lib/append.lua), else it stays and this cursor goes from it to the log end,
-- reading the log once.  The cursor's records may be older than what the appends indexed
-- meanwhile, so each one is compared with its key's indexed entry: an older record is
-- superseded by it (ZADD LT keeps a smaller score already there: an exact superseding
-- offset is never replaced by a later one), a newer one becomes the key's latest.  A record
-- indexed already (by an append after a gap) is left as it is.
-- ARGV[4] = most log entries read by this call.
-- Returns {indexed up to (offset), done (1: the whole log is indexed), records indexed}.
local log, state = KEYS[1], KEYS[2]
local index, dirty, tombstones = KEYS[5], KEYS[6], KEYS[7]
local limit = 2 ^ tonumber(ARGV[1])
local max_entries = tonumber(ARGV[4])
local gone = deleted_reply(state)
if gone then return gone end

local known = redis.call('HMGET', state, 'compact.indexed', 'log_end')
local indexed = tonumber(known[1]) or -1
local log_end = tonumber(known[2]) or -1
if indexed >= log_end then return {indexed, 1, 0} end

local start = indexed < 0 and '-' or '(' .. offset_id(indexed, limit)
local entries = redis.call('XRANGE', log, start, offset_id(log_end, limit), 'COUNT', max_entries)
local count = 0
for _, entry in ipairs(entries) do
  local id, fields = entry[1], entry[2]
  local offset = id_offset(id, limit)
  local key, tombstone = nil, true
  for j = 1, #fields - 1, 2 do
    local name = fields[j]
    if name == 'key' then key = fields[j + 1] elseif name == 'value' then tombstone = false end
  end
  if key then
    local latest = redis.call('HGET', index, key)
    if latest ~= id then
      count = count + 1
      local latest_offset = latest and id_offset(latest, limit)
      if latest_offset and latest_offset > offset then
        redis.call('ZADD', dirty, 'LT', fmt(latest_offset), id)
      else
        redis.call('HSET', index, key, id)
        if latest then redis.call('ZADD', dirty, 'LT', fmt(offset), latest) end
        if tombstone then redis.call('ZADD', tombstones, fmt(offset), id) end
      end
    end
  end
  indexed = offset
end
-- A short page read to the log end (whose last record compaction may have removed).
if #entries < max_entries then indexed = log_end end
redis.call('HSET', state, 'compact.indexed', fmt(indexed))
return {indexed, indexed >= log_end and 1 or 0, count}
