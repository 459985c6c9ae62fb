--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, replica
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, replica_id, offset,
--   max_copy, copy_module
-- REPLICA_FETCH: "replica r has everything up to offset".  Copies the leader's entries after
-- the last one in replica r's stream (KEYS[5]) up to min(offset, log end), at most
-- ARGV[6] entries per call so one call never blocks Redis for long, then records the acked
-- offset (what the replica really holds: the target when the copy completed, else the last
-- entry copied), the caught-up time when it has the whole log, and recomputes ISR and hw.
-- ARGV[4] = replica id (1..RF-1, checked by the caller), ARGV[5] = offset (may be past the
-- log end: clamped), ARGV[6] = max entries to copy, ARGV[7] = '1' where Redis has the
-- streamadapter module (mapping/connection/append_module.c), whose STREAMADAPTER.COPY copies
-- the entries in one call.
-- Returns {acked, hw, isr ("0 1 2"), log_end, complete (1: copied everything asked for)}.
local log, state, hw_channel, replica = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local limit = 2 ^ tonumber(ARGV[1])
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local r, wanted, max_copy = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local copy_module = ARGV[7] == '1'
local gone = deleted_reply(state)
if gone then return gone end

if is_follower(state) then
  return redis.error_reply(K.V1_BAD_REQUEST .. ' partition is not leader')
end

local now = now_ms()
local log_end = tonumber(redis.call('HGET', state, 'log_end')) or -1
local target = wanted
if target > log_end then target = log_end end

-- The replica stream's last entry is where copying resumes (XADD needs increasing ids).
local copied = -1
local after = nil
local last = redis.call('XREVRANGE', replica, '+', '-', 'COUNT', 1)
if #last > 0 then
  copied = id_offset(last[1][1], limit)
  after = last[1][1]
end

local complete = 1
if target > copied then
  local count
  if copy_module then
    local reply = redis.call('STREAMADAPTER.COPY', log, replica, after or '-',
      offset_id(target, limit), max_copy)
    count = reply[1]
    if count > 0 then copied = reply[2] * limit + reply[3] end
  else
    local start = '-'
    if after then start = '(' .. after end
    local entries = redis.call('XRANGE', log, start, offset_id(target, limit), 'COUNT', max_copy)
    for _, entry in ipairs(entries) do
      redis.call('XADD', replica, entry[1], unpack(entry[2]))
      copied = id_offset(entry[1], limit)
    end
    count = #entries
  end
  -- A full batch may have left entries behind: then the replica holds only what was copied.
  if count >= max_copy and copied < target then complete = 0 end
end

local acked = target
if complete == 0 then acked = copied end
redis.call('HSET', state, replica_field(r, 'acked_offset'), fmt(acked))
if acked >= log_end then
  redis.call('HSET', state, replica_field(r, 'caught_up_ms'), now)
end
local hw, isr = refresh_hw(state, hw_channel, rf, lag_max_ms, now)
return {acked, hw, table.concat(isr, ' '), log_end, complete}
