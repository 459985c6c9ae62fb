--! include lib/clock.lua
-- Shared by every script that touches one partition: the clock, ISR and high watermark.
-- Partition scripts take KEYS = {log, state, hw_channel, appended_channel, ...} and
-- ARGV[1..3] = {sequence_bits, replication_factor, replica_lag_max_ms}; their own arguments
-- follow from ARGV[4].  (Channels are passed as KEYS: they carry the partition's hash tag.)
-- (mapping/partition/partitions.py PartitionHead builds that head.)
-- Offsets are Lua numbers (doubles): exact because offsets stay below 2^53 (see codec).


local function replica_field(r, name)
  return 'replica.' .. int_text(r) .. '.' .. name
end

-- Offset <-> stream entry id ("ms-seq"), limit = 2^sequence_bits.
local function offset_id(offset, limit)
  local ms = math.floor(offset / limit)
  return fmt(ms) .. '-' .. fmt(offset - ms * limit)
end

local function id_offset(id, limit)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)) * limit + tonumber(string.sub(id, dash + 1))
end

-- The hash fields refresh_hw reads: log end, hw, ISR, then each follower's acked offset and
-- caught-up time (as settle_hw takes them).
local function hw_fields(fields, rf)
  fields[#fields + 1] = 'log_end'
  fields[#fields + 1] = 'hw'
  fields[#fields + 1] = 'isr'
  for r = 1, rf - 1 do
    fields[#fields + 1] = replica_field(r, 'acked_offset')
    fields[#fields + 1] = replica_field(r, 'caught_up_ms')
  end
  return fields
end

-- refresh_hw's work on the hw_fields values `v` (from v[at] on; `log_end` the log end as a
-- number): the HSET arguments of a change go into `written`, and the hw channel's message
-- is returned (nil: nothing to say), for the caller to PUBLISH after its HSET.
local function settle_hw(v, at, log_end, rf, lag_max_ms, now, written)
  local old_hw = tonumber(v[at + 1]) or -1
  local old_isr = v[at + 2]
  local hw = log_end
  local isr = {0}
  local isr_text = '0'
  local next_change = -1
  for r = 1, rf - 1 do
    local acked = tonumber(v[at + 2 * r + 1]) or -1
    local caught_up = tonumber(v[at + 2 * r + 2])
    local in_sync = acked >= log_end
    if not in_sync and caught_up and now - caught_up <= lag_max_ms then
      in_sync = true
      if acked < hw then hw = acked end
      local left = caught_up + lag_max_ms - now + 1
      if next_change < 0 or left < next_change then next_change = left end
    end
    if in_sync then
      isr[#isr + 1] = r
      isr_text = isr_text .. ' ' .. int_text(r)
    end
  end
  if hw < old_hw then hw = old_hw end
  if hw ~= old_hw or isr_text ~= old_isr then
    written[#written + 1] = 'hw'
    written[#written + 1] = int_text(hw)
    written[#written + 1] = 'isr'
    written[#written + 1] = isr_text
  end
  local message = nil
  if hw > old_hw or (old_isr and isr_text ~= old_isr) then
    message = int_text(hw) .. ' ' .. int_text(#isr) .. ' ' .. int_text(next_change)
  end
  return hw, isr, next_change, message
end

-- Recompute ISR and the high watermark from the state hash at time `now`, store them when
-- they changed, and return hw, isr (a list), next_change (ms until the first lagging ISR
-- member falls out of the ISR, -1 when none lags: waiters re-check then, not by polling).
-- A follower is in sync while it has everything (acked >= log end) or was caught up within
-- replica_lag_max_ms; hw = min acked offset over the ISR (the leader counts with its log end)
-- and never moves backwards.
-- When hw advances or the ISR changes, "<hw> <isr_size> <next_change>" is PUBLISHed on the
-- partition's hw channel: that wakes acks=all waiters (which need both hw and |ISR|).
-- (Numbers are offsets, times and counts below 2^53: int_text, no float formatting.)
local function refresh_hw(state, hw_channel, rf, lag_max_ms, now)
  local v = redis.call('HMGET', state, unpack(hw_fields({}, rf)))
  local written = {}
  local hw, isr, next_change, message =
    settle_hw(v, 1, tonumber(v[1]) or -1, rf, lag_max_ms, now, written)
  if #written > 0 then
    redis.call('HSET', state, unpack(written))
  end
  if message then
    redis.call('PUBLISH', hw_channel, message)
  end
  return hw, isr, next_change
end

-- Wakes the hw channel's watchers with the state as it is ("<hw> <isr_size> -1"), after a
-- change a Fetch answer reports that moves neither the hw nor the ISR (the log start): Kafka
-- Fetch keeps what it read while its channel is quiet (mapping/replication/hw_views.py).
local function publish_state(state, hw_channel)
  local v = redis.call('HMGET', state, 'hw', 'isr')
  if not (v[1] and v[2]) then return end
  local isr_size = 0
  for _ in string.gmatch(v[2], '%S+') do isr_size = isr_size + 1 end
  redis.call('PUBLISH', hw_channel, v[1] .. ' ' .. isr_size .. ' -1')
end

-- With --redis-wait-replicas readers pass durable = '1' and see hw only up to durable_hw,
-- the log end the Redis replicas are known to have (partition/durable_mark.lua): a failover then
-- cannot take back a record that was served.
local function readable_hw(state, hw, durable)
  if durable ~= '1' then return hw end
  local mark = tonumber(redis.call('HGET', state, 'durable_hw')) or -1
  if mark < hw then return mark end
  return hw
end

-- Offsets are sparse, so a bound (the hw, or the last offset before an open transaction) is
-- reported as the last entry at or below it: a reader that read every record up to it sits
-- at that entry + 1, and Kafka's clients see the end (PARTITION_EOF, lag 0) only when their
-- position equals the end offset answered. With no entry at or below `bound`: one before the
-- log start (positions below it were removed), else -1.
local function reachable(log, state, bound, limit)
  if bound < 0 then return bound end
  local before = redis.call('XREVRANGE', log, offset_id(bound, limit), '-', 'COUNT', 1)
  if #before > 0 then return id_offset(before[1][1], limit) end
  local start = tonumber(redis.call('HGET', state, 'log_start'))
  if start and start - 1 < bound then return start - 1 end
  return -1
end

-- A reader's view of the partition: hw as `reachable` reports it (hw is an entry whenever it
-- is the log end; an ISR member's acked offset need not be), and the last stable offset
-- while a transaction is open (one past the last entry before the oldest open transaction's
-- first offset, txn_first), else -1.
local function reader_bounds(log, state, hw, log_end, limit)
  if hw >= 0 and hw < log_end then hw = reachable(log, state, hw, limit) end
  local open_first = tonumber(redis.call('HGET', state, 'txn_first'))
  if not open_first or open_first > hw then return hw, -1 end
  return hw, reachable(log, state, open_first - 1, limit) + 1
end

-- A deleted topic's partition state is a tombstone {deleted = 1} for a while (see
-- mapping/admin.py): a pod still holding the topic's settings must not write into it.
local function deleted_reply(state)
  if redis.call('HEXISTS', state, 'deleted') == 1 then
    return redis.error_reply(K.V1_UNKNOWN_TOPIC .. ' topic was deleted')
  end
  return nil
end

-- Trims the replica streams keys[first..] below `cut` as the leader log was trimmed; each
-- keeps its last entry (REPLICA_FETCH resumes after it).
local function trim_replicas(keys, first, cut, limit)
  for i = first, #keys do
    local last = redis.call('XREVRANGE', keys[i], '+', '-', 'COUNT', 1)
    if #last > 0 then
      local replica_cut = id_offset(last[1][1], limit)
      if cut < replica_cut then replica_cut = cut end
      redis.call('XTRIM', keys[i], 'MINID', offset_id(replica_cut, limit))
    end
  end
end

local function is_follower(state)
  return redis.call('HGET', state, 'role') == 'follower'
end

-- Value size marks, kept by partition/produce.lua so that a reader can size a native XRANGE
-- without copying entries through Lua (see Partitions.start_consume): 'size.<k>' (k =
-- K.SIZE_MIN_BITS .. K.SIZE_MAX_BITS, mapping/core/size_marks.py) is the last offset of an append
-- holding a value of more than 2^k bytes (absent: none ever), 'size.from' the first offset
-- appended while marks were kept (a log written before has no marks below it).

-- HSET arguments recording that an append ending at `last` held a value of `largest` bytes.
local function size_mark_fields(fields, largest, last)
  if largest <= 2 ^ K.SIZE_MIN_BITS then return end
  local last_text = int_text(last)
  for k = K.SIZE_MIN_BITS, K.SIZE_MAX_BITS do
    if largest <= 2 ^ k then break end
    fields[#fields + 1] = 'size.' .. int_text(k)
    fields[#fields + 1] = last_text
  end
end

-- {log_end, size.from, size.<SIZE_MIN_BITS>, ..., size.<SIZE_MAX_BITS>} (-1 when absent).
local function size_marks(state)
  local fields = {'log_end', 'size.from'}
  for k = K.SIZE_MIN_BITS, K.SIZE_MAX_BITS do
    fields[#fields + 1] = 'size.' .. k
  end
  local v = redis.call('HMGET', state, unpack(fields))
  for i = 1, #fields do
    v[i] = tonumber(v[i]) or -1
  end
  return v
end
