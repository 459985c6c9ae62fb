"""Every Redis key name the project uses, built in this one module.

Each key carries a hash tag so that every script touches one slot (Redis Cluster):

    <prefix>:meta                              hash    deployment settings (sequence_bits,
                                                       redis_wait_replicas, redis_wait_timeout_ms)
    <prefix>:topics                            set     topic names
    <prefix>:topics:ids                        hash    topic id -> topic name (Kafka asks by id)
    <prefix>:topic:{<topic>}                   hash    partitions, replication_factor, topic_id,
                                                       ...
    <prefix>:part:{<topic>:<p>}:log            stream  the leader log; fields key, value, ts
    <prefix>:part:{<topic>:<p>}:state          hash    role, log_end, hw, isr, replica.<r>.*
                                                       (a deleted topic's: {deleted: 1, topic_id},
                                                       expiring)
    <prefix>:part:{<topic>:<p>}:replica:<r>    stream  follower replica r's copy of the log
    <prefix>:part:{<topic>:<p>}:hw             channel high-watermark notifications
    <prefix>:part:{<topic>:<p>}:appended       channel new records, for idle followers
    <prefix>:part:{<topic>:<p>}:sink           hash    Spark sink task -> "<epoch> <n> <offset>"
    <prefix>:part:{<topic>:<p>}:compact:keys   hash    record key -> entry id of its latest
                                                       record (compacted topics)
    <prefix>:part:{<topic>:<p>}:compact:dirty  zset    entry id of a superseded record -> the
                                                       offset of the record superseding it
    <prefix>:part:{<topic>:<p>}:compact:tombstones zset  entry id of a tombstone (null value)
                                                       -> its own offset
    <prefix>:part:{<topic>:<p>}:segments       zset    roll points (first offsets of the
                                                       segments after the first) of topics with
                                                       time retention (docs/compaction.md)
    <prefix>:topics:created                    channel names of newly created topics
    <prefix>:topics:deleted                    channel names of deleted topics (pods forget them)
    <prefix>:topics:changed                    channel names of topics given more partitions
                                               (pods forget them and read them again)
    <prefix>:replicator:{leases}:pods          zset    live pods (replicator heartbeat)
    <prefix>:replicator:{leases}:shard:<n>     string  owner pod of replicator shard n
    <prefix>:pod:<pod id>                      channel one pod's private notifications
    <prefix>:wait_probe                        string  written before Redis WAIT
    <prefix>:part:{module-probe}:log           stream  never written: the append module's probe
    <prefix>:groups                            set     "<group> <topic>" pairs (group_entry)
    <prefix>:retention:{lease}:pods|:owner     retention task lease (one pod trims at a time)
    <prefix>:group:{<group>:<topic>}:meta        hash  generation, assignor, partitions,
                                                     active_ms (last commit / member seen)
    <prefix>:group:{<group>:<topic>}:members     hash  consumer id -> last heartbeat (ms)
    <prefix>:group:{<group>:<topic>}:assignment  hash  consumer id -> partitions "0 3 6"
    <prefix>:group:{<group>:<topic>}:offsets     hash  partition -> committed (next) offset
    <prefix>:group:{<group>:<topic>}:offset_metadata  hash  partition -> commit metadata (Kafka),
                                                     "<partition>.leader_epoch" -> the committed
                                                     leader epoch (Kafka; absent: none, -1),
                                                     "<partition>.fence" -> the largest commit
                                                     fence token used on it (Kafka)
    <prefix>:kgroups                           set     Kafka group names (ListGroups)
    <prefix>:kgroup:{<group>}:meta             hash    state, generation, protocol_type,
                                                       protocol, leader, deadlines,
                                                       commit_fence (Kafka group)
    <prefix>:kgroup:{<group>}:members          hash    member id -> session expiry (ms)
    <prefix>:kgroup:{<group>}:member_info      hash    member id -> JSON (instance id, client
                                                       id, host, timeouts)
    <prefix>:kgroup:{<group>}:protocols        hash    member id -> msgpack [name, metadata, ...]
    <prefix>:kgroup:{<group>}:joining          hash    member id -> join order (JoinGroup pending)
    <prefix>:kgroup:{<group>}:generation_of    hash    member id -> generation it was joined in
    <prefix>:kgroup:{<group>}:assignment       hash    member id -> assignment bytes (SyncGroup)
    <prefix>:kgroup:{<group>}:static           hash    group.instance.id -> member id
    <prefix>:kgroup:{<group>}:pending_ids      hash    member id handed out with
                                                       MEMBER_ID_REQUIRED -> expiry (ms)
    <prefix>:kgroup:{<group>}:events           channel state changes, wakes JoinGroup/SyncGroup
    <prefix>:kgroup:{<group>}:consumer:meta    hash    KIP-848 group: group_epoch,
                                                       target_epoch, assignor, commit_fence
    <prefix>:kgroup:{<group>}:consumer:members hash    member id -> session expiry (ms)
    <prefix>:kgroup:{<group>}:consumer:member  hash    member id -> JSON (epoch, subscription,
                                                       assigned, revoking, instance id, ...)
    <prefix>:kgroup:{<group>}:consumer:target  hash    member id -> JSON target assignment
    <prefix>:kgroup:{<group>}:consumer:topics  hash    topic -> partition count (last seen)
    <prefix>:kgroup:{<group>}:txn:offsets      hash    "<producer id> <topic> <partition>" ->
                                                       "<producer epoch> <offset> <leader
                                                       epoch> <metadata>": TxnOffsetCommit's
                                                       pending offsets (until EndTxn)
    <prefix>:kgroup:{<group>}:txn:producers    hash    producer id -> "<epoch> <last ms>":
                                                       the newest epoch seen (fences zombies)
    <prefix>:sharegroups                       set     share group names (ListGroups): their
                                                       group_parts
    <prefix>:kgroup:{<group>}:share:meta       hash    KIP-932 share group: group_epoch
    <prefix>:kgroup:{<group>}:share:members    hash    member id -> JSON (session expiry,
                                                       epochs, subscribed topics, client id,
                                                       host, rack)
    <prefix>:kgroup:{<group>}:share:topics     set     every topic a member subscribed to
                                                       (where the group may have state)
    share:<group>                              (no key) the Redis consumer group a share
                                                       group keeps on each partition's log
                                                       stream (mapping/share_group/)
    <prefix>:users                             hash    client user -> password hash (AUTH)
    <prefix>:broker:{configs}                  hash    cluster-wide dynamic broker configs
                                                       (Kafka name -> text: log.retention.ms ...)
    <prefix>:broker:{configs}:changed          channel they changed: pods read them again
    <prefix>:kgroup:{<group>}:configs          hash    Kafka group configs (KIP-848's
                                                       consumer.session.timeout.ms ...)
    <prefix>:users:scram                       hash    client user -> SCRAM secrets (Kafka
                                                       SASL SCRAM-SHA-256/512)
    <prefix>:acls                              set     Kafka ACL bindings, one JSON array each
                                                       (mapping/security/acl_store.py)
    <prefix>:acls:changed                      channel the bindings changed: pods read them again
    <prefix>:quotas                            hash    Kafka client quotas: JSON [entity, key] ->
                                                       value (mapping/security/quotas.py)
    <prefix>:quotas:changed                    channel they changed: pods read them again
    <prefix>:part:{<topic>:<p>}:producers      hash    Kafka producer id -> epoch and its
                                                       last five batches (idempotence)
    <prefix>:part:{<topic>:<p>}:producer_times zset    Kafka producer id -> its last append
                                                       (ms): its state expires after a while
    <prefix>:part:{<topic>:<p>}:txn:open       hash    producer id -> "<epoch> <first offset>
                                                       <transaction>" of its open transaction
                                                       here (first offset -1: nothing appended
                                                       yet; transaction: the coordinator's
                                                       txn_start_ms, -1 unknown); the
                                                       state hash's txn_first is the smallest
                                                       first offset (absent: none: LSO = hw)
    <prefix>:part:{<topic>:<p>}:txn:aborted    zset    "<producer id> <first offset>" of an
                                                       aborted transaction -> its abort
                                                       marker's offset (read_committed)
    <prefix>:kafka:producer_ids                string  the last Kafka producer id (INCR)
    <prefix>:kafka:{leader_epochs}             list    "<epoch> <start ms> <replid>": the
                                                       Kafka leader epochs, one per Redis
                                                       primary that served the data
                                                       (mapping/replication/leader_epochs.py)
    <prefix>:kafka:{brokers}:live              zset    pod id -> registration expiry (ms)
    <prefix>:kafka:{brokers}:pods              hash    pod id -> advertised HOST:PORT
    <prefix>:kafka:{brokers}:ids               hash    advertised HOST:PORT -> node id
    <prefix>:kafka:{brokers}:next_id           string  the last node id (INCR)
    <prefix>:txn:{<txn id>}                    hash    a Kafka transactional id's coordinator
                                                       state: producer_id, epoch, state,
                                                       timeout_ms, txn_start_ms, ...
                                                       (mapping/txn/transactions.py)
    <prefix>:txn:{<txn id>}:partitions         set     "<topic>\t<partition>" in the transaction
    <prefix>:txn:{<txn id>}:groups             set     groups whose offsets it commits (their
                                                       group_part)
    <prefix>:txn:{<txn id>}:registering        zset    "<producer id> <epoch> <txn_start_ms>
                                                       <topic>\t<partition>" -> when
                                                       AddPartitionsToTxn began registering it
                                                       (dropped once verified; the completer
                                                       releases those a dead pod left)
    <prefix>:txns:{index}                      zset    transactional id part -> when the
                                                       completer looks at it next (ms)
    <prefix>:txns:{lease}:pods|:owner          the transaction completer's lease

Topic, V1 group and consumer names are validated before they get here (``[A-Za-z0-9._-]``,
1-249 characters), so a name can never contain ``{``, ``}``, ``:`` or a space and every key
is unambiguous.

Kafka group ids may be any string (Kafka's only rule: not empty for the membership APIs), so
wherever ``<group>`` stands above, in a key, in a "<group> <topic>" entry of the groups set
and in the kgroups set, it is ``group_part(group)``: the name itself when it is made of
``[A-Za-z0-9._-]`` (every V1 name, so existing keys keep their names), else its UTF-8 bytes
with every byte outside that set written ``%XX`` (upper-case hex); the empty id is ``%``. A
part is thus always ``[A-Za-z0-9._%-]``: no hash-tag brace, no ``:``, no space, no glob
character, and a plain name never holds ``%``, so no two ids share a part. Everything that
reads group names back from Redis goes through ``group_name`` / ``parse_group_entry``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from mapping.core.codec import to_str

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,249}")
DEFAULT_PREFIX = "rsa"
# The bytes a group id's key part keeps as they are (NAME_PATTERN's characters).
_PLAIN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# The empty group id's part (Kafka accepts "" for OffsetCommit/OffsetFetch): percent-encoding
# never writes a lone "%", and a hash tag must not be empty ("{}" hashes the whole key).
EMPTY_GROUP_PART = "%"


def is_valid_name(name: str) -> bool:
    """Topic, V1 group and consumer names: 1-249 characters of ``[A-Za-z0-9._-]``."""
    return NAME_PATTERN.fullmatch(name) is not None


def group_part(group: str) -> str:
    """The part of a key (and of a groups-set entry) that names group ``group``: see the
    module's docstring. Unchanged for a name of ``[A-Za-z0-9._-]``."""
    if NAME_PATTERN.fullmatch(group):
        return group
    if not group:
        return EMPTY_GROUP_PART
    # surrogatepass: any Python string has a part, and group_name gives it back
    encoded = group.encode("utf-8", "surrogatepass")
    return "".join(chr(b) if b in _PLAIN_BYTES else f"%{b:02X}" for b in encoded)


def group_name(part: bytes | str) -> str:
    """The group id whose ``group_part`` is ``part`` (as read back from Redis)."""
    text = to_str(part)
    if "%" not in text:
        return text
    if text == EMPTY_GROUP_PART:
        return ""
    try:
        return unquote_to_bytes(text).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not written by group_part (edited by hand): shown as is
        return text


def group_entry(group: str, topic: str) -> str:
    """The groups set's entry of (group, topic)."""
    return f"{group_part(group)} {topic}"


def parse_group_entry(entry: bytes | str) -> tuple[str, str] | None:
    """(group, topic) of a groups-set entry; None for a malformed one."""
    text = to_str(entry)
    part, _, topic = text.partition(" ")
    return (group_name(part), topic) if topic else None


def epoch_field(partition: int | str) -> str:
    """The field of a (group, topic)'s ``offset_metadata`` hash holding a partition's
    committed leader epoch (the Lua scripts spell it ``p .. '.leader_epoch'``)."""
    return f"{partition}.leader_epoch"


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    log: str
    state: str
    hw_channel: str
    appended_channel: str
    replica_prefix: str
    producers: str
    producer_times: str
    # Compacted topics (docs/compaction.md): kept by the appends, drained by compaction.
    compact_index: str
    compact_dirty: str
    compact_tombstones: str
    # Roll points of the log's segments (partition/segment_roll.lua): where time retention cuts.
    segments: str
    # Transactions (mapping/partition/partition_txns.py): the open ones and the aborted index.
    txn_open: str
    txn_aborted: str

    def replica(self, replica_id: int) -> str:
        return f"{self.replica_prefix}{replica_id}"

    def compaction(self) -> list[str]:
        """The compaction keys, in the order the scripts take them: index, dirty, tombstones."""
        return [self.compact_index, self.compact_dirty, self.compact_tombstones]


@dataclass(frozen=True, slots=True)
class GroupKeys:
    meta: str
    members: str
    assignment: str
    offsets: str
    offset_metadata: str


@dataclass(frozen=True, slots=True)
class KafkaGroupKeys:
    """A Kafka classic group: every key under the one hash tag ``{<group>}``, in the order the
    ``kafka_group/*`` scripts take them (see ``mapping/lua/lib/kgroup.lua``)."""

    meta: str
    members: str
    member_info: str
    protocols: str
    joining: str
    generation_of: str
    assignment: str
    static: str
    pending_ids: str
    events: str
    consumer_meta: str
    consumer_members: str
    consumer_member: str
    consumer_target: str
    consumer_topics: str
    # Transactions (TxnOffsetCommit; not in script_keys: only the txn_offset scripts take
    # them, see mapping/kafka_group/txn_offsets.py)
    txn_offsets: str
    txn_producers: str

    def script_keys(self) -> list[str]:
        return [
            self.meta,
            self.members,
            self.member_info,
            self.protocols,
            self.joining,
            self.generation_of,
            self.assignment,
            self.static,
            self.pending_ids,
            self.events,
            self.consumer_meta,
            self.consumer_members,
            self.consumer_member,
            self.consumer_target,
            self.consumer_topics,
        ]


@dataclass(frozen=True, slots=True)
class ShareGroupKeys:
    """A share group's membership (KIP-932), under the group's hash tag, in the order the
    ``share_group/heartbeat`` script takes them."""

    meta: str
    members: str
    topics: str

    def script_keys(self) -> list[str]:
        return [self.meta, self.members, self.topics]


@dataclass(frozen=True, slots=True)
class TxnKeys:
    """A Kafka transactional id's coordinator state, under one hash tag, in the order the
    ``txn_coord/*`` scripts take them."""

    state: str
    partitions: str
    groups: str
    # partitions being registered by AddPartitionsToTxn (until the registering pod verified
    # them): what the completer releases when that pod died (mapping/txn/transactions.py)
    registering: str

    def script_keys(self) -> list[str]:
        return [self.state, self.partitions, self.groups]


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = DEFAULT_PREFIX

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def topics(self) -> str:
        return f"{self.prefix}:topics"

    @property
    def topic_ids(self) -> str:
        """Topic id -> name, beside the topics set: Kafka names topics by id (Metadata,
        DeleteTopics, KIP-848), and ids are random, so they are looked up here."""
        return f"{self.topics}:ids"

    @property
    def groups(self) -> str:
        return f"{self.prefix}:groups"

    @property
    def topics_channel(self) -> str:
        """Where a newly created topic's name is published (the replicators listen)."""
        return f"{self.topics}:created"

    @property
    def topics_changed_channel(self) -> str:
        """Where a topic's name is published when its partition count grew: every pod drops
        what it cached and reads the topic's settings again."""
        return f"{self.topics}:changed"

    @property
    def topics_deleted_channel(self) -> str:
        """Where a deleted topic's name is published: every pod forgets what it cached."""
        return f"{self.topics}:deleted"

    @property
    def broker_configs(self) -> str:
        """The cluster-wide dynamic broker configs (mapping/topic/broker_configs.py)."""
        return f"{self.prefix}:broker:{{configs}}"

    @property
    def broker_configs_channel(self) -> str:
        """Where a change of the broker configs is announced: every pod reads them again."""
        return f"{self.broker_configs}:changed"

    def group_configs(self, group: str) -> str:
        """Kafka group ``group``'s configs (GROUP resource), in the group's slot."""
        return f"{self.prefix}:kgroup:{{{group_part(group)}}}:configs"

    @property
    def wait_probe(self) -> str:
        return f"{self.prefix}:wait_probe"

    @property
    def module_probe(self) -> str:
        """A log key no partition has (topic names hold no braces), under ``part:`` as the
        logs are (what a Spark user's ACL allows): append_module.has_command's probe."""
        return f"{self.prefix}:part:{{module-probe}}:log"

    @property
    def module_probe_replica(self) -> str:
        """``module_probe``'s replica stream (in its slot): append_module.copy_probe's."""
        return f"{self.prefix}:part:{{module-probe}}:replica:1"

    def pod_channel(self, pod_id: str) -> str:
        return f"{self.prefix}:pod:{pod_id}"

    def replicator_leases(self, shards: int) -> list[str]:
        """The pods set, then one lease key per shard (one hash tag: one script, one slot)."""
        base = f"{self.prefix}:replicator:{{leases}}"
        return [f"{base}:pods", *(f"{base}:shard:{n}" for n in range(shards))]

    @property
    def retention_lease(self) -> list[str]:
        """The pods set and the one lease key of the retention task (one hash tag)."""
        base = f"{self.prefix}:retention:{{lease}}"
        return [f"{base}:pods", f"{base}:owner"]

    @property
    def users(self) -> str:
        """Client credentials for AUTH: field = user name, value = salted password hash."""
        return f"{self.prefix}:users"

    @property
    def users_scram(self) -> str:
        """Kafka SASL SCRAM secrets: field = user name, value =
        mapping.security.auth.scram_secrets'."""
        return f"{self.prefix}:users:scram"

    @property
    def acls(self) -> str:
        """Kafka's ACL bindings: a set of canonical encodings (mapping/security/acl_store.py)."""
        return f"{self.prefix}:acls"

    @property
    def acls_changed_channel(self) -> str:
        """Where a change of the ACL bindings is announced: every pod reads them again."""
        return f"{self.acls}:changed"

    @property
    def client_quotas(self) -> str:
        """Kafka's client quotas: field = JSON [entity, quota key], value = the bound
        (mapping/security/quotas.py)."""
        return f"{self.prefix}:quotas"

    @property
    def client_quotas_changed_channel(self) -> str:
        """Where a change of the client quotas is announced: every pod reads them again."""
        return f"{self.client_quotas}:changed"

    @property
    def kafka_producer_ids(self) -> str:
        return f"{self.prefix}:kafka:producer_ids"

    @property
    def kafka_leader_epochs(self) -> str:
        return f"{self.prefix}:kafka:{{leader_epochs}}"

    @property
    def kafka_brokers(self) -> list[str]:
        """The Kafka broker registry: live, pods, ids, next_id (one hash tag: one slot)."""
        base = f"{self.prefix}:kafka:{{brokers}}"
        return [f"{base}:live", f"{base}:pods", f"{base}:ids", f"{base}:next_id"]

    def topic(self, topic: str) -> str:
        return f"{self.prefix}:topic:{{{topic}}}"

    def partition(self, topic: str, partition: int) -> PartitionKeys:
        base = f"{self.prefix}:part:{{{topic}:{partition}}}"
        return PartitionKeys(
            log=f"{base}:log",
            state=f"{base}:state",
            hw_channel=self.hw_channel(topic, partition),
            appended_channel=f"{base}:appended",
            replica_prefix=f"{base}:replica:",
            producers=f"{base}:producers",
            producer_times=f"{base}:producer_times",
            compact_index=f"{base}:compact:keys",
            compact_dirty=f"{base}:compact:dirty",
            compact_tombstones=f"{base}:compact:tombstones",
            segments=f"{base}:segments",
            txn_open=f"{base}:txn:open",
            txn_aborted=f"{base}:txn:aborted",
        )

    def hw_channel(self, topic: str, partition: int) -> str:
        """The partition's hw channel alone (``partition(...).hw_channel``), for the Fetch
        long-polls that name it for every partition of every request."""
        return f"{self.prefix}:part:{{{topic}:{partition}}}:hw"

    def sink_markers(self, topic: str, partition: int) -> str:
        """The Spark sink's progress per writer task in this partition (same slot as the
        log, so the append and its marker change in one script call)."""
        return f"{self.prefix}:part:{{{topic}:{partition}}}:sink"

    def group(self, group: str, topic: str) -> GroupKeys:
        base = f"{self.prefix}:group:{{{group_part(group)}:{topic}}}"
        return GroupKeys(
            meta=f"{base}:meta",
            members=f"{base}:members",
            assignment=f"{base}:assignment",
            offsets=f"{base}:offsets",
            offset_metadata=f"{base}:offset_metadata",
        )

    @property
    def kafka_groups(self) -> str:
        """Kafka groups (either protocol), for ListGroups: their ``group_part``s."""
        return f"{self.prefix}:kgroups"

    def kafka_group(self, group: str) -> KafkaGroupKeys:
        base = f"{self.prefix}:kgroup:{{{group_part(group)}}}"
        return KafkaGroupKeys(
            meta=f"{base}:meta",
            members=f"{base}:members",
            member_info=f"{base}:member_info",
            protocols=f"{base}:protocols",
            joining=f"{base}:joining",
            generation_of=f"{base}:generation_of",
            assignment=f"{base}:assignment",
            static=f"{base}:static",
            pending_ids=f"{base}:pending_ids",
            events=f"{base}:events",
            consumer_meta=f"{base}:consumer:meta",
            consumer_members=f"{base}:consumer:members",
            consumer_member=f"{base}:consumer:member",
            consumer_target=f"{base}:consumer:target",
            consumer_topics=f"{base}:consumer:topics",
            txn_offsets=f"{base}:txn:offsets",
            txn_producers=f"{base}:txn:producers",
        )

    def share_group(self, group: str) -> ShareGroupKeys:
        """Share group ``group``'s membership (beside its Kafka group keys: one namespace)."""
        base = f"{self.prefix}:kgroup:{{{group_part(group)}}}:share"
        return ShareGroupKeys(
            meta=f"{base}:meta", members=f"{base}:members", topics=f"{base}:topics"
        )

    @property
    def share_groups(self) -> str:
        """Share groups, for ListGroups: their ``group_part``s."""
        return f"{self.prefix}:sharegroups"

    @staticmethod
    def share_consumer_group(group: str) -> str:
        """The name of the Redis consumer group share group ``group`` keeps on the log
        stream of every partition it reads (not a key: a group inside the stream)."""
        return f"share:{group_part(group)}"

    def txn(self, transactional_id: str) -> TxnKeys:
        """Transactional id ``transactional_id``'s coordinator state (its ``group_part``)."""
        base = f"{self.prefix}:txn:{{{group_part(transactional_id)}}}"
        return TxnKeys(
            state=base,
            partitions=f"{base}:partitions",
            groups=f"{base}:groups",
            registering=f"{base}:registering",
        )

    @property
    def txn_index(self) -> str:
        """Every transactional id (its part) by when the completer looks at it next."""
        return f"{self.prefix}:txns:{{index}}"

    @property
    def txn_lease(self) -> list[str]:
        """The pods set and the one lease key of the transaction completer (one hash tag)."""
        base = f"{self.prefix}:txns:{{lease}}"
        return [f"{base}:pods", f"{base}:owner"]
