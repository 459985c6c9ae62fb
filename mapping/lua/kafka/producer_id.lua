-- KEYS: producer_ids
-- ARGV: none
-- A new Kafka producer id (InitProducerId): one more than the last one handed out, and never
-- below Redis's clock in microseconds. A plain INCR would hand an id out again after a
-- failover that took back its last INCRs (the promoted replica lacked them), and two live
-- producers would share one id: each one's batches refused, or taken for the other's
-- retries. The clock part keeps ids above everything handed out before the failover: a
-- failover takes longer than the promoted node's clock may lag the lost one's (seconds
-- of detection against milliseconds of skew), and ids run ahead of the clock only when
-- more than one a microsecond is asked for. Ids stay below 2^53 (exact in Lua) until the
-- year 2255. Returns the id.
local last = tonumber(redis.call('GET', KEYS[1])) or 0
local t = redis.call('TIME')
local clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local id = math.max(last + 1, clock_us)
redis.call('SET', KEYS[1], string.format('%.0f', id))
return id
