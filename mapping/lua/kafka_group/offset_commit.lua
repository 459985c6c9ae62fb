--! include lib/clock.lua
-- KEYS: offsets, offset_metadata, meta
-- ARGV: token, ...
-- OffsetCommit's write: a Kafka group's committed offsets in the same hash V1 COMMIT/OFFSET
-- use (Keys.group(group, topic).offsets: partition -> next offset to read), the commit
-- metadata and the committed leader epoch beside it (offset_metadata: field <p> and field
-- <p>.leader_epoch), and the commit time as the (group, topic)'s activity (meta's
-- active_ms, what offsets retention counts from, as for V1 commits).
-- Fencing: offset_metadata's field <p>.fence is the largest token (kafka_group/commit_check's
-- answer, or the group's fence an OffsetFetch read: kafka_group/offset_fetch) used on the
-- partition. A commit with a smaller token was checked before the group moved on, and the
-- newer generation or epoch already read or wrote here: it is not written, so a check that
-- went stale in a paused pod never puts old offsets over newer ones (single Redis and
-- Cluster alike: this script alone decides, on the offsets' own slot).
-- KEYS[1] offsets, KEYS[2] offset_metadata, KEYS[3] meta (V1's, of the same (group, topic)).
-- ARGV[1] the token, then partition, offset, metadata, leader epoch, ... (decimal strings;
-- '' metadata: none; a negative epoch: none).
-- Returns {the commit time (ms; the offsets mirror's record time), the partitions not
-- written...} (only the time: all were).
local offsets, metadata, meta = KEYS[1], KEYS[2], KEYS[3]
local token = tonumber(ARGV[1])
local now = now_ms()
local reply, written = {now}, false
for i = 2, #ARGV, 4 do
  local p = ARGV[i]
  local fence = tonumber(redis.call('HGET', metadata, p .. '.fence') or '0')
  if fence > token then
    reply[#reply + 1] = p
  else
    redis.call('HSET', offsets, p, ARGV[i + 1])
    if ARGV[i + 2] == '' then
      redis.call('HDEL', metadata, p)
    else
      redis.call('HSET', metadata, p, ARGV[i + 2])
    end
    if tonumber(ARGV[i + 3]) < 0 then
      redis.call('HDEL', metadata, p .. '.leader_epoch')
    else
      redis.call('HSET', metadata, p .. '.leader_epoch', ARGV[i + 3])
    end
    if token > fence then redis.call('HSET', metadata, p .. '.fence', ARGV[1]) end
    written = true
  end
end
if written then redis.call('HSET', meta, 'active_ms', fmt(now)) end
return reply
