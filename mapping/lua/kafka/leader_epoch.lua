--! include lib/clock.lua
-- KEYS: registry
-- ARGV: replid, epoch_base_s, [start_ms]
-- Registers the Redis primary this connection reached as a Kafka leader epoch
-- (mapping/replication/leader_epochs.py): KEYS[1] lists "<epoch> <start ms> <replid>", oldest first.
-- ARGV[1] = the primary's master_replid (a promoted replica gets a new one), ARGV[2] = the
-- epoch base (s since the Unix epoch). A replid already listed changes nothing; an unknown
-- one appends epoch max(last + 1, seconds since the base), started now (ARGV[3], when given:
-- the registered primary's own clock, read on it, where the registry is on another node of a
-- Cluster): monotonic even when a failover took back the registry's own last entries.
-- Returns the registry, oldest first.
local registry, replid = KEYS[1], ARGV[1]
local entries = redis.call('LRANGE', registry, 0, -1)
local last = 0
for i, entry in ipairs(entries) do
  local epoch, start, known = string.match(entry, '^(%d+) (%d+) (%S+)$')
  if known == replid then
    -- registered already; a pod whose own clock read came first moves its start earlier
    local given = tonumber(ARGV[3])
    if given and given < tonumber(start) then
      entries[i] = epoch .. ' ' .. int_text(given) .. ' ' .. replid
      redis.call('LSET', registry, i - 1, entries[i])
    end
    return entries
  end
  if epoch and tonumber(epoch) > last then last = tonumber(epoch) end
end
local now = tonumber(ARGV[3]) or now_ms()
local epoch = math.max(last + 1, math.floor(now / 1000) - tonumber(ARGV[2]))
local entry = int_text(epoch) .. ' ' .. int_text(now) .. ' ' .. replid
redis.call('RPUSH', registry, entry)
entries[#entries + 1] = entry
return entries
