--! include lib/clock.lua
-- KEYS: live, pods, ids, next_id
-- ARGV: none
-- The live Kafka brokers: {node id, address, node id, address, ...}, one per address.
-- KEYS as kafka/register.lua.
local live, pods, ids = KEYS[1], KEYS[2], KEYS[3]
local alive = redis.call('ZRANGEBYSCORE', live, '(' .. now_ms(), '+inf')
local seen = {}
local reply = {}
for _, pod in ipairs(alive) do
  local address = redis.call('HGET', pods, pod)
  if address and not seen[address] then
    seen[address] = true
    local id = redis.call('HGET', ids, address)
    if id then
      reply[#reply + 1] = tonumber(id)
      reply[#reply + 1] = address
    end
  end
end
return reply
