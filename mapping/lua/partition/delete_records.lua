--! include lib/partition.lua
-- KEYS: log, state, hw_channel, appended, ...
-- ARGV: sequence_bits, replication_factor, replica_lag_max_ms, cut
-- Kafka DeleteRecords on one partition: remove the records below `cut` from the leader
-- log (and the follower replica streams, each keeping its last entry as retention does), and
-- record the new log start, so fetches below it are OFFSET_OUT_OF_RANGE (published on the hw
-- channel: Fetch reports the log start).
-- KEYS = {log, state, hw_channel, appended, replica 1, ..., replica RF-1}.
-- ARGV[4] = cut (an offset; -1: the high watermark, i.e. everything committed).
-- Returns {0, low watermark (the log start now)} or {1, Kafka hw} when cut > Kafka hw.
local log, state = KEYS[1], KEYS[2]
-- A deleted topic's partition (a pod that has not heard yet): nothing is written into it.
local gone = deleted_reply(state)
if gone then return gone end
local limit = 2 ^ tonumber(ARGV[1])
local cut = tonumber(ARGV[4])
local hw = tonumber(redis.call('HGET', state, 'hw')) or -1
if cut < 0 then cut = hw + 1 end
if cut > hw + 1 then return {1, hw + 1} end
local old_start = tonumber(redis.call('HGET', state, 'log_start')) or -1
if cut <= old_start then return {0, old_start} end
redis.call('XTRIM', log, 'MINID', offset_id(cut, limit))
trim_replicas(KEYS, 5, cut, limit)
redis.call('HSET', state, 'log_start', fmt(cut))
publish_state(state, KEYS[3])
return {0, cut}
