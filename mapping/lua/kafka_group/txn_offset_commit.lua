--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics, txn_offsets, txn_producers
-- ARGV: member_id, instance_id, generation, producer_id, producer_epoch, ...
-- TxnOffsetCommit (Kafka's handleTxnCommitOffsets): the membership check of a transactional
-- commit (lib/kgroup.lua commit_refusal, transactional rules), the producer's epoch check,
-- then the offsets go to the group's pending transactional offsets (KEYS[16]: field
-- "<producer id> <topic> <partition>" -> "<producer epoch> <offset> <leader epoch>
-- <metadata>"), not to the committed ones: kafka_group/txn_offset_end hands them to
-- EndTxn, which writes them on commit and drops them on abort. One slot (the group's), so
-- check and write are one step; a later commit of the same producer and partition replaces
-- the earlier one, as Kafka keeps the last.
-- KEYS[17] producer id -> "<epoch> <ms>": the newest epoch seen for the producer here (by a
-- commit or an EndTxn); an older epoch is a zombie: INVALID_PRODUCER_EPOCH, as Kafka's
-- producer state answers a transactional append with an old epoch.
-- ARGV[1] member id ('' none), ARGV[2] group.instance.id (''), ARGV[3] generation or member
-- epoch (-1 none), ARGV[4] producer id, ARGV[5] producer epoch, then per partition: topic,
-- partition, offset, leader epoch (-1 none), metadata ('' none).
-- Returns the error code (0: stored).
local txn_offsets, txn_producers = KEYS[16], KEYS[17]
local member_id, instance_id, gen = ARGV[1], ARGV[2], tonumber(ARGV[3])
local producer_id, producer_epoch = ARGV[4], tonumber(ARGV[5])
settle()
local refusal = commit_refusal(member_id, instance_id, gen, true)
if refusal then return refusal end
local seen = redis.call('HGET', txn_producers, producer_id)
if seen and tonumber(string.match(seen, '^(%-?%d+)')) > producer_epoch then
  return K.INVALID_PRODUCER_EPOCH
end
redis.call('HSET', txn_producers, producer_id, ARGV[5] .. ' ' .. fmt(now))
for i = 6, #ARGV, 5 do
  redis.call('HSET', txn_offsets, producer_id .. ' ' .. ARGV[i] .. ' ' .. ARGV[i + 1],
    ARGV[5] .. ' ' .. ARGV[i + 2] .. ' ' .. ARGV[i + 3] .. ' ' .. ARGV[i + 4])
end
return K.NONE
