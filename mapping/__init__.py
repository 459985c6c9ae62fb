"""Everything that knows Redis, on floors: a subpackage imports only the floors below it
(tests/test_layout.py holds it to that), and the Lua scripts of ``lua/`` sit in families
beside the packages that call them.

operations   deleting and growing topics, retention, inspection and lag, offset resets
share_group  Kafka share groups (KIP-932): members, records in flight  (lua/share_group)
kafka_group  Kafka consumer groups, both protocols, their offsets    (lua/kafka_group)
group        V1 groups, the __consumer_offsets mirror, group deletion (lua/group, offsets_topic)
txn          the transaction coordinator                            (lua/txn_coord)
replication  replicas, acks=all, durable reads, high watermark, leader epochs (lua/replicator)
partition    a partition's log, Kafka records, markers, segments, compaction
                                                   (lua/partition, lua/kafka, lua/txn)
topic        topics and their configs, brokers, the partitioner     (lua/topic)
security     users (V1 AUTH, SASL), ACLs, client quotas      (lua/users)
connection   Redis: connecting, pipelining, pub/sub, waits, the script catalogue, the
             streamadapter module (an append's XADDs in one command)
core         key names, the offset codec, records' fields, errors
"""

# The floors, lowest first: each may import those before it (tests/test_layout.py).
FLOORS = (
    "core",
    "connection",
    "security",
    "topic",
    "partition",
    "replication",
    "txn",
    "group",
    "kafka_group",
    "share_group",
    "operations",
)
