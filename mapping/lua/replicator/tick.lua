--! include lib/clock.lua
-- KEYS: pods, ...
-- ARGV: pod_id, lease_ms, release
-- One replicator tick of a pod: heartbeat, renew its shard leases, release shards above its
-- fair share, take free shards up to it.  A lease is a string key holding the owner's pod id
-- with a PX expiry: taken with SET NX PX, renewed only by its owner (compare-and-set here),
-- so when an owner dies its leases expire and the other pods take them on their next tick.
-- KEYS[1] = pods sorted set (score = heartbeat expiry ms), KEYS[2..] = shard lease keys
-- (all share one hash tag).  ARGV = pod id, lease ms, release ("1": give everything up).
-- Returns the shard numbers (0-based) this pod owns after the tick.
local pods, me, lease, release = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now = now_ms()

if release then
  redis.call('ZREM', pods, me)
  for i = 2, #KEYS do
    if redis.call('GET', KEYS[i]) == me then redis.call('DEL', KEYS[i]) end
  end
  return {}
end

redis.call('ZADD', pods, now + lease, me)
redis.call('ZREMRANGEBYSCORE', pods, '-inf', '(' .. now)
local alive = redis.call('ZCARD', pods)
local fair = math.ceil((#KEYS - 1) / alive)

local mine, free = {}, {}
for i = 2, #KEYS do
  local owner = redis.call('GET', KEYS[i])
  if owner == me then
    redis.call('PEXPIRE', KEYS[i], lease)
    mine[#mine + 1] = i
  elseif not owner then
    free[#free + 1] = i
  end
end
while #mine > fair do
  redis.call('DEL', KEYS[table.remove(mine)])
end
for _, i in ipairs(free) do
  if #mine >= fair then break end
  if redis.call('SET', KEYS[i], me, 'NX', 'PX', lease) then
    mine[#mine + 1] = i
  end
end
local shards = {}
for _, i in ipairs(mine) do shards[#shards + 1] = i - 2 end
return shards
