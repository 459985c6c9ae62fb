--! include lib/clock.lua
-- KEYS: registry
-- ARGV: replid, epoch_base_s
-- Registers the Redis primary this connection reached as a Kafka leader epoch
-- (mapping/leader_epochs.py): KEYS[1] lists "<epoch> <start ms> <replid>", oldest first.
-- ARGV[1] = the primary's master_replid (a promoted replica gets a new one), ARGV[2] = the
-- epoch base (s since the Unix epoch). A replid already listed changes nothing; an unknown
-- one appends epoch max(last + 1, seconds since the base), started now: monotonic even when
-- a failover took back the registry's own last entries.
-- Returns the registry, oldest first.
local registry, replid = KEYS[1], ARGV[1]
local entries = redis.call('LRANGE', registry, 0, -1)
local last = 0
for _, entry in ipairs(entries) do
  local epoch, _, known = string.match(entry, '^(%d+) (%d+) (%S+)$')
  if known == replid then return entries end
  if epoch and tonumber(epoch) > last then last = tonumber(epoch) end
end
local now = now_ms()
local epoch = math.max(last + 1, math.floor(now / 1000) - tonumber(ARGV[2]))
local entry = int_text(epoch) .. ' ' .. int_text(now) .. ' ' .. replid
redis.call('RPUSH', registry, entry)
entries[#entries + 1] = entry
return entries
