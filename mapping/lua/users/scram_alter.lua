-- KEYS: users_scram
-- ARGV: user, mechanism, secret
-- Kafka's AlterUserScramCredentials for one user: sets (secret given) or deletes (secret
-- empty) the user's SCRAM secret of one mechanism in its field of users:scram
-- (mapping/security/auth.py's encoding, "<mechanism>$...,<mechanism>$..."), keeping its
-- other mechanism's; the field goes with its last secret. In one script so that two
-- alterations of one user's two mechanisms never undo each other.
-- Returns 1, or 0 for a deletion that found no secret of that mechanism (nothing changed).
local current = redis.call('HGET', KEYS[1], ARGV[1])
local prefix = ARGV[2] .. '$'
local kept = {}
local found = false
if current then
  for part in string.gmatch(current, '[^,]+') do
    if string.sub(part, 1, #prefix) == prefix then
      found = true
    else
      kept[#kept + 1] = part
    end
  end
end
if ARGV[3] == '' then
  if not found then
    return 0
  end
else
  kept[#kept + 1] = ARGV[3]
end
if #kept == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], table.concat(kept, ','))
end
return 1
