-- KEYS: state, partitions, groups
-- ARGV: none
-- A transactional id's state in one read: {hash fields and values (flat), partitions, groups};
-- an empty hash when the id is unknown.
return {redis.call('HGETALL', KEYS[1]), redis.call('SMEMBERS', KEYS[2]),
        redis.call('SMEMBERS', KEYS[3])}
