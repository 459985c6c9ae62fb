--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, role
-- Mark a partition leader or follower for every pod.  ARGV[4] = role.  Returns hw.
-- Becoming leader wakes the replicator (it stops fetching a follower partition).
local state, hw_channel, appended = KEYS[2], KEYS[3], KEYS[4]
local rf, lag_max_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local gone = deleted_reply(state)
if gone then return gone end
redis.call('HSET', state, 'role', ARGV[4])
local hw = refresh_hw(state, hw_channel, rf, lag_max_ms, now_ms())
if ARGV[4] == 'leader' then
  redis.call('PUBLISH', appended, 'leader')
end
return hw
