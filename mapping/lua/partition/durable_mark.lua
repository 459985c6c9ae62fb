-- KEYS: state, hw_channel
-- ARGV: log_end
-- With --redis-wait-replicas (mapping/replication/durable.py): ARGV[1] is a log end the Redis replicas
-- were just seen to have (read before a WAIT that reached them all); readers see records
-- only up to it, so none a failover can take back is ever served. Never lowered. Wakes
-- hw watchers (Kafka long-polls) with the usual "<hw> <isr_size> <next_change>" message.
-- Returns 1 when the mark moved.
local state, hw_channel = KEYS[1], KEYS[2]
local mark = tonumber(ARGV[1])
local v = redis.call('HMGET', state, 'durable_hw', 'hw', 'isr', 'deleted')
if v[4] or mark <= (tonumber(v[1]) or -1) then
  return 0
end
redis.call('HSET', state, 'durable_hw', ARGV[1])
if v[2] and v[3] then
  local isr_size = 0
  for _ in string.gmatch(v[3], '%S+') do isr_size = isr_size + 1 end
  redis.call('PUBLISH', hw_channel, v[2] .. ' ' .. isr_size .. ' -1')
end
return 1
