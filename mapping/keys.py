"""Every Redis key name the project uses, built in this one module.

Each key carries a hash tag so that every script touches one slot (Redis Cluster):

    <prefix>:meta                              hash    deployment settings (sequence_bits)
    <prefix>:topics                            set     topic names
    <prefix>:topic:{<topic>}                   hash    partitions, replication_factor, ...
    <prefix>:part:{<topic>:<p>}:log            stream  the leader log; fields key, value, ts
    <prefix>:part:{<topic>:<p>}:state          hash    role, log_end, hw, isr, replica.<r>.*
    <prefix>:part:{<topic>:<p>}:replica:<r>    stream  follower replica r's copy of the log
    <prefix>:part:{<topic>:<p>}:hw             channel high-watermark notifications
    <prefix>:part:{<topic>:<p>}:appended       channel new records, for idle followers
    <prefix>:topics:created                    channel names of newly created topics
    <prefix>:replicator:{leases}:pods          zset    live pods (replicator heartbeat)
    <prefix>:replicator:{leases}:shard:<n>     string  owner pod of replicator shard n
    <prefix>:pod:<pod id>                      channel one pod's private notifications
    <prefix>:wait_probe                        string  written before Redis WAIT
    <prefix>:groups                            set     "<group> <topic>" pairs
    <prefix>:retention:{lease}:pods|:owner     retention task lease (one pod trims at a time)
    <prefix>:group:{<group>:<topic>}:meta        hash  generation, assignor, partitions
    <prefix>:group:{<group>:<topic>}:members     hash  consumer id -> last heartbeat (ms)
    <prefix>:group:{<group>:<topic>}:assignment  hash  consumer id -> partitions "0 3 6"
    <prefix>:group:{<group>:<topic>}:offsets     hash  partition -> committed (next) offset
    <prefix>:users                             hash    client user -> password hash (AUTH)

Names are validated before they get here (``[A-Za-z0-9._-]``, 1-249 characters), so a
name can never contain ``{``, ``}`` or ``:`` and every key is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,249}")
DEFAULT_PREFIX = "rsa"


def is_valid_name(name: str) -> bool:
    """Topic, group and consumer names: 1-249 characters of ``[A-Za-z0-9._-]``."""
    return NAME_PATTERN.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    log: str
    state: str
    hw_channel: str
    appended_channel: str
    replica_prefix: str

    def replica(self, replica_id: int) -> str:
        return f"{self.replica_prefix}{replica_id}"


@dataclass(frozen=True, slots=True)
class GroupKeys:
    meta: str
    members: str
    assignment: str
    offsets: str


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
    def groups(self) -> str:
        return f"{self.prefix}:groups"

    @property
    def topics_channel(self) -> str:
        """Where a newly created topic's name is published (the replicators listen)."""
        return f"{self.topics}:created"

    @property
    def wait_probe(self) -> str:
        return f"{self.prefix}:wait_probe"

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

    def topic(self, topic: str) -> str:
        return f"{self.prefix}:topic:{{{topic}}}"

    def partition(self, topic: str, partition: int) -> PartitionKeys:
        base = f"{self.prefix}:part:{{{topic}:{partition}}}"
        return PartitionKeys(
            log=f"{base}:log",
            state=f"{base}:state",
            hw_channel=f"{base}:hw",
            appended_channel=f"{base}:appended",
            replica_prefix=f"{base}:replica:",
        )

    def group(self, group: str, topic: str) -> GroupKeys:
        base = f"{self.prefix}:group:{{{group}:{topic}}}"
        return GroupKeys(
            meta=f"{base}:meta",
            members=f"{base}:members",
            assignment=f"{base}:assignment",
            offsets=f"{base}:offsets",
        )
