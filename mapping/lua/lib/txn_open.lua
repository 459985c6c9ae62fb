--! include lib/clock.lua
-- A partition's open transactions (txn:open, mapping/partition/partition_txns.py): producer id ->
-- "<epoch> <first offset> <transaction>", shared by txn/add.lua, txn/marker.lua and
-- kafka/produce.lua. first offset -1: registered, nothing appended yet. transaction: which
-- of the producer's transactions the registration belongs to (the coordinator's
-- txn_start_ms, unique per producer id and epoch; -1 unknown), so that a marker meant for an
-- earlier transaction of the same producer and epoch never ends a later one.

local function txn_open_parse(text)
  local words = {}
  for word in string.gmatch(text, '%S+') do words[#words + 1] = tonumber(word) end
  return words[1], words[2], words[3] or -1
end

local function txn_open_text(epoch, first, transaction)
  return int_text(epoch) .. ' ' .. fmt(first) .. ' ' .. int_text(transaction)
end

-- The producer's epoch as the partition last saw it (the producers hash, kafka/produce.lua:
-- "<epoch> <batches>..."), -1 when none: a batch or marker with an older one is fenced.
local function producer_epoch(producers, producer_id)
  local entry = redis.call('HGET', producers, producer_id)
  if not entry then return -1, nil end
  return tonumber(string.match(entry, '^%S+')), entry
end
