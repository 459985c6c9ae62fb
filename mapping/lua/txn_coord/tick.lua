--! include lib/txn_coord.lua
-- KEYS: state, partitions, groups, registering
-- ARGV: grace_ms, expiration_ms
-- The completer's look at one transactional id whose time came (mapping/txn/txn_completer.py):
--   Ongoing past txn_start_ms + timeout_ms: fenced (epoch bumped, as Kafka's
--     abortTimedOutTransactions) and PrepareAbort -> 'finish';
--   Prepare* older than grace_ms (its pod died mid-EndTxn): claimed -> 'finish';
--   Empty / Complete* not used for expiration_ms (transactional.id.expiration.ms): deleted
--     -> 'gone';
--   no such id -> 'gone'; else '' and when to look again.
-- Registrations a dead pod left (the registering set's entries older than grace_ms) whose
-- transaction is no longer the open one (another txn_start_ms or producer id, or not
-- Ongoing / Prepare*) are handed back to be released (an abort marker for exactly that
-- transaction: a no-op when its own marker ended it); while any entry is left the id is
-- looked at again within grace_ms.
-- Returns {action, next look (ms, -1 with 'gone'), registering entries to release...}.
local key = KEYS[1]
local grace_ms, expiration_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local txn = txn_load(key)
local now = now_ms()

local releases = {}
local pending = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', int_text(now - grace_ms))
local open = txn and (txn.state == 'Ongoing' or is_prepare(txn.state))
for _, entry in ipairs(pending) do
  local pid, _, start = string.match(entry, '^(%S+) (%S+) (%S+) ')
  local live = open and tonumber(pid) == txn.producer_id and tonumber(start) == txn.txn_start_ms
  if not live then releases[#releases + 1] = entry end
end
local registering = redis.call('ZCARD', KEYS[4]) > 0

local function answer(action, next_ms)
  if registering then
    if next_ms < 0 then action = '' end
    if next_ms < 0 or next_ms > now + grace_ms then next_ms = now + grace_ms end
  end
  local reply = {action, next_ms}
  for _, entry in ipairs(releases) do reply[#reply + 1] = entry end
  return reply
end

if not txn then return answer('gone', -1) end
if txn.state == 'Ongoing' then
  local deadline = txn.txn_start_ms + txn.timeout_ms
  if deadline > now then return answer('', deadline) end
  txn.epoch = txn.epoch + 1
  txn.last_epoch = -1
  txn.state = 'PrepareAbort'
  claim_prepare(key, txn, now)  -- the completer aborts it
  redis.call('HSET', key, 'end_reason', 'timeout')
  return answer('finish', now + grace_ms)
end
if is_prepare(txn.state) then
  if not stale_prepare(txn, now, grace_ms) then
    return answer('', txn.last_update_ms + grace_ms)
  end
  claim_prepare(key, txn, now)
  return answer('finish', now + grace_ms)
end
local expiry = txn.last_update_ms + expiration_ms
if expiry > now or registering then return answer('', expiry) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return answer('gone', -1)
