--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, index, dirty, tombstones, ...
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, min_compaction_lag_ms,
--   max_compaction_lag_ms, min_cleanable_dirty_ratio, delete_retention_ms, max_remove,
--   triggered
-- Compaction of one partition, one bounded step (docs/compaction.md): removes records that a
-- later record of their key superseded, and tombstones (null values) whose time is up, with
-- XDEL, from the leader log and the follower replica streams. What to remove comes from the
-- index the appends keep (lib/append.lua), never from reading the log: the cost of a call
-- follows the records it removes.
-- KEYS = {log, state, hw_channel, appended, index, dirty, tombstones, replica 1, ...,
-- replica RF-1}.  ARGV[4] = min.compaction.lag.ms, ARGV[5] = max.compaction.lag.ms,
-- ARGV[6] = min.cleanable.dirty.ratio, ARGV[7] = delete.retention.ms, ARGV[8] = most records
-- removed by this call, ARGV[9] = '1' when an earlier call of this run found compaction due
-- (the run goes on to the end without asking again), else '0'.
-- The rules (Kafka's cleaner; the segments are partition/segment_roll.lua's):
-- * nothing at or above the active segment's first offset (the state's 'segment.start';
--   absent: no segment was found yet, nothing is cleaned) is removed, and a record goes
--   only when a record below it supersedes it: the cleaner keeps, per key, the newest
--   record of the closed segments, whatever the active segment holds;
-- * a superseded record goes once the record superseding it is committed (at most hw) and
--   older than min.compaction.lag.ms (its offset's time), when compaction is due: the
--   superseded records that may go are at least min.cleanable.dirty.ratio of the log's
--   records, or the oldest superseding record is older than max.compaction.lag.ms;
-- * a tombstone goes once it is committed and older than min.compaction.lag.ms +
--   delete.retention.ms, and only after every record it superseded is gone (else an older
--   value of its key would come back), and only when indexed (at most the state's
--   'compact.indexed'); its key leaves the index if it still names it;
-- * the latest record of a key is never removed (it is in no 'dirty' set; a tombstone is
--   the latest record of its key, and it goes only by the rule above).
-- Returns {superseded records removed, tombstones removed, more (1: call again), superseded
-- records left in the index, triggered (1: compaction was due)}.
local log, state = KEYS[1], KEYS[2]
local index, dirty, tombstones = KEYS[5], KEYS[6], KEYS[7]
local limit = 2 ^ tonumber(ARGV[1])
local min_lag, max_lag = tonumber(ARGV[4]), tonumber(ARGV[5])
local ratio, delete_retention = tonumber(ARGV[6]), tonumber(ARGV[7])
local max_remove, triggered = tonumber(ARGV[8]), ARGV[9] == '1'

local now = now_ms()
local known = redis.call('HMGET', state, 'hw', 'compact.indexed', 'segment.start')
local hw = tonumber(known[1]) or -1
local active = tonumber(known[3]) or 0
-- Records above 'compact.indexed' may be unindexed (partition/compact_index.lua indexes
-- them): an older record of a tombstone's key may be among them, so no tombstone above it
-- goes yet (superseded records may: the index names them only once superseded).
local indexed = tonumber(known[2]) or -1
-- Offsets below `cut` are committed, older than the min lag and in closed segments (a
-- dirty entry's score is its superseding record's offset); tombstones below
-- `tombstone_cut` have also outlived delete.retention.ms.
local cut = (now - min_lag + 1) * limit
if cut > hw + 1 then cut = hw + 1 end
if cut > active then cut = active end
local tombstone_cut = (now - min_lag - delete_retention + 1) * limit
if tombstone_cut > cut then tombstone_cut = cut end
if tombstone_cut > indexed + 1 then tombstone_cut = indexed + 1 end

local function first_score(zset)
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2])
end

-- Removes `ids` from the log and the replica streams; returns how many the log held.
local function remove(ids)
  local removed = redis.call('XDEL', log, unpack(ids))
  for i = 8, #KEYS do redis.call('XDEL', KEYS[i], unpack(ids)) end
  return removed
end

local below = '(' .. fmt(cut)
if not triggered then
  local oldest = first_score(dirty)
  if oldest and oldest < cut then
    local len = redis.call('XLEN', log)
    local eligible = redis.call('ZCOUNT', dirty, '-inf', below)
    triggered = (len > 0 and eligible / len >= ratio) or oldest < (now - max_lag) * limit
  end
end
local first_tombstone = first_score(tombstones)
local expiring = first_tombstone ~= nil and first_tombstone < tombstone_cut

local removed, tombstones_removed, budget = 0, 0, max_remove
if triggered or expiring then
  -- Not due: only the records the expiring tombstones superseded (scores below their cut).
  local upto = triggered and below or '(' .. fmt(tombstone_cut)
  local ids = redis.call('ZRANGEBYSCORE', dirty, '-inf', upto, 'LIMIT', 0, budget)
  if #ids > 0 then
    removed = remove(ids)
    redis.call('ZREM', dirty, unpack(ids))
    redis.call('ZREM', tombstones, unpack(ids))  -- a superseded tombstone expires no more
    budget = budget - #ids
  end
end
if expiring and budget > 0 then
  -- A tombstone at offset o superseded the records scored o: it goes only below them all.
  local upto = tombstone_cut
  local pending = first_score(dirty)
  if pending and pending < upto then upto = pending end
  local ids = redis.call('ZRANGEBYSCORE', tombstones, '-inf', '(' .. fmt(upto),
    'LIMIT', 0, budget)
  if #ids > 0 then
    for _, id in ipairs(ids) do
      local entry = redis.call('XRANGE', log, id, id)
      if #entry > 0 then
        local fields = entry[1][2]
        for j = 1, #fields - 1, 2 do
          if fields[j] == 'key' then
            if redis.call('HGET', index, fields[j + 1]) == id then
              redis.call('HDEL', index, fields[j + 1])
            end
            break
          end
        end
      end
    end
    tombstones_removed = remove(ids)
    redis.call('ZREM', tombstones, unpack(ids))
  end
end
if removed + tombstones_removed > 0 then
  redis.call('HINCRBY', state, 'compacted', removed + tombstones_removed)
end

local more = 0
if triggered and redis.call('ZCOUNT', dirty, '-inf', below) > 0 then more = 1 end
local first_left = first_score(tombstones)
if first_left and first_left < tombstone_cut then more = 1 end
return {removed, tombstones_removed, more, redis.call('ZCARD', dirty), triggered and 1 or 0}
