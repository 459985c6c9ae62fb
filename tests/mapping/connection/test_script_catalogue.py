"""The Lua scripts' catalogue (mapping/connection/scripts.py): every script declares its KEYS and
ARGV,
is loaded by exactly one module constant and called through the builder beside it, which
passes what the header declares, all keys in one Redis Cluster slot; includes are expanded
once each, in dependency order; constants come from Python."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.crc import key_slot

from mapping.connection import scripts
from mapping.connection.script_constants import LUA_CONSTANTS
from mapping.core import errors, kafka_errors
from mapping.core.keys import Keys
from mapping.group.deletion import group_delete_call, group_expire_call, kafka_group_delete_call
from mapping.group.groups import (
    GroupHead,
    group_commit_call,
    group_heartbeat_call,
    group_join_call,
    group_leave_call,
    group_sync_call,
    kafka_group_live_call,
)
from mapping.group.offsets_mirror import offsets_topic_append_call
from mapping.kafka_group.base import (
    kafka_group_consumer_describe_call,
    kafka_group_describe_call,
    kafka_group_v1_live_call,
)
from mapping.kafka_group.classic import (
    kafka_group_heartbeat_call,
    kafka_group_join_call,
    kafka_group_join_wait_call,
    kafka_group_leave_call,
    kafka_group_sync_call,
)
from mapping.kafka_group.consumer import (
    kafka_group_consumer_heartbeat_call,
    kafka_group_consumer_target_call,
)
from mapping.kafka_group.offsets import (
    kafka_group_commit_check_call,
    kafka_group_fence_call,
    kafka_group_offset_commit_call,
    kafka_group_offset_delete_call,
    kafka_group_offset_fetch_call,
)
from mapping.kafka_group.subscriptions import Subscription
from mapping.kafka_group.txn_offsets import (
    PendingOffset,
    TxnCommitter,
    kafka_group_txn_offset_clear_call,
    kafka_group_txn_offset_commit_call,
    kafka_group_txn_offset_end_call,
    kafka_group_txn_offset_write_call,
)
from mapping.operations.inspection import partition_lag_call
from mapping.operations.retention import partition_retention_trim_call
from mapping.operations.topic_lifecycle import partition_delete_call
from mapping.partition.compaction import (
    partition_compact_call,
    partition_compact_index_call,
    partition_compact_sweep_call,
)
from mapping.partition.kafka import (
    kafka_produce_call,
    kafka_producer_id_call,
    partition_delete_records_call,
)
from mapping.partition.partition_scripts import (
    PartitionHead,
    partition_consume_call,
    partition_produce_call,
    partition_replica_fetch_call,
    partition_set_role_call,
    partition_status_call,
)
from mapping.partition.partition_txns import txn_add_call, txn_marker_call
from mapping.partition.segments import partition_segment_roll_call
from mapping.replication.durable import partition_durable_mark_call
from mapping.replication.leader_epochs import kafka_leader_epoch_call
from mapping.replication.replicator import replicator_tick_call
from mapping.security.auth import users_scram_alter_call
from mapping.share_group.share_groups import (
    AckBatch,
    ShareSettings,
    share_group_acknowledge_call,
    share_group_acquire_call,
    share_group_heartbeat_call,
    share_group_release_call,
)
from mapping.share_group.state import (
    share_group_offsets_alter_call,
    share_group_offsets_delete_call,
    share_group_offsets_describe_call,
)
from mapping.topic.brokers import kafka_brokers_call, kafka_register_call
from mapping.topic.topic_rules import Compaction, Segments
from mapping.topic.topics import (
    partition_revive_call,
    topic_delete_call,
    topic_ensure_call,
    topic_grow_call,
)
from mapping.txn.transactions import (
    ADD_PARTITIONS,
    VERIFY,
    txn_coord_add_call,
    txn_coord_complete_call,
    txn_coord_describe_call,
    txn_coord_end_call,
    txn_coord_index_touch_call,
    txn_coord_init_call,
)
from mapping.txn.txn_completer import txn_coord_index_settle_call, txn_coord_tick_call
from spark_connector.appender import spark_sink_append_call
from spark_connector.group_commit import spark_commit_call
from spark_connector.sink_records import Record
from tests.support import ROOT

KEYS = Keys("catalogue")
PART = PartitionHead(KEYS.partition("t", 0), 10, 3, 10_000)
GROUP = GroupHead(KEYS.group("g", "t"), 10_000, 3)
KGROUP = KEYS.kafka_group("g")
TXN = KEYS.txn("tx")
RECORD = (b"k", b"v", 5, [("h", b"x")])
PENDING = PendingOffset(b"7 t 0", b"0 42 -1 ", "t", 0, 42, -1, "")


def _sync(recheck: bool, assignments: dict[str, bytes]) -> tuple:
    return kafka_group_sync_call(
        KGROUP,
        member_id="c-1",
        instance_id=None,
        generation=1,
        protocol_type="consumer",
        protocol_name="range",
        recheck=recheck,
        assignments=assignments,
    )


# Per script, calls its builder makes (several where the count of items varies).
SAMPLE_CALLS: dict[str, list[Callable[[], tuple]]] = {
    "partition/produce": [
        lambda: partition_produce_call(PART, [b"k", b"v", b"k2", b"v2"]),
        lambda: partition_produce_call(PART, [b"k", b"v"], PART.keys.compaction()),
    ],
    "partition/compact": [
        lambda: partition_compact_call(PART, Compaction(compact=True), 100, False)
    ],
    "partition/compact_index": [lambda: partition_compact_index_call(PART, 200)],
    "partition/compact_sweep": [lambda: partition_compact_sweep_call(PART, 200)],
    "partition/consume": [
        lambda: partition_consume_call(PART, "0-0", 10, 0, False),
        lambda: partition_consume_call(PART, "0-0", 10, 1000, True),
    ],
    "partition/set_role": [lambda: partition_set_role_call(PART, "follower")],
    "partition/replica_fetch": [lambda: partition_replica_fetch_call(PART, 1, 42, 1000)],
    "partition/status": [
        lambda: partition_status_call(PART),
        lambda: partition_status_call(PART, durable_reads=True),
    ],
    "partition/retention_trim": [lambda: partition_retention_trim_call(PART, 1000, -1, -1, 100)],
    "partition/segment_roll": [lambda: partition_segment_roll_call(PART, Segments(), True)],
    "partition/lag": [lambda: partition_lag_call(PART, "0-0", 1000)],
    "partition/delete_records": [lambda: partition_delete_records_call(PART, -1)],
    "partition/durable_mark": [lambda: partition_durable_mark_call(PART.keys, 42)],
    "partition/delete": [
        lambda: partition_delete_call([PART.keys.log, PART.keys.state], 1000, ""),
        lambda: partition_delete_call(
            [PART.keys.log, PART.keys.state, PART.keys.producers, PART.keys.replica(1)], 1000, "i"
        ),
    ],
    "partition/revive": [lambda: partition_revive_call(KEYS, "t", 0, "id")],
    "topic/ensure": [lambda: topic_ensure_call(KEYS, "t", 3, 3, 2, True)],
    "topic/grow": [lambda: topic_grow_call(KEYS, "t", 6)],
    "topic/delete": [lambda: topic_delete_call(KEYS, "t", "id")],
    "group/join": [lambda: group_join_call(GROUP, "c1", "")],
    "group/sync": [lambda: group_sync_call(GROUP, "c1", 1)],
    "group/heartbeat": [lambda: group_heartbeat_call(GROUP, "c1", 1)],
    "group/leave": [lambda: group_leave_call(GROUP, "c1", 1)],
    "group/commit": [lambda: group_commit_call(GROUP, "c1", 1, 0, 42)],
    "group/delete": [lambda: group_delete_call(GROUP, force=True)],
    "group/expire": [lambda: group_expire_call(GROUP, 60_000, kafka_live=False)],
    "kafka_group/join": [
        lambda: kafka_group_join_call(
            KGROUP,
            initial_delay_ms=300,
            member_id="",
            instance_id=None,
            client_id="c",
            client_host="/h",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            require_known_id=True,
            new_member_id="c-1",
            protocols=[("range", b"m1"), ("roundrobin", b"m2")],
        )
    ],
    "kafka_group/join_wait": [lambda: kafka_group_join_wait_call(KGROUP, "c-1")],
    "kafka_group/sync": [
        lambda: _sync(recheck=False, assignments={"c-1": b"a", "c-2": b"b"}),
        lambda: _sync(recheck=True, assignments={}),
    ],
    "kafka_group/heartbeat": [lambda: kafka_group_heartbeat_call(KGROUP, "c-1", None, 1)],
    "kafka_group/leave": [
        lambda: kafka_group_leave_call(KGROUP, [("c-1", None)]),
        lambda: kafka_group_leave_call(KGROUP, [("c-1", None), ("", "static-2")]),
    ],
    "kafka_group/commit_check": [lambda: kafka_group_commit_check_call(KGROUP, "c-1", None, 1)],
    "kafka_group/fence": [lambda: kafka_group_fence_call(KGROUP)],
    "kafka_group/describe": [lambda: kafka_group_describe_call(KGROUP, summary=True)],
    "kafka_group/live": [lambda: kafka_group_live_call(KGROUP)],
    "kafka_group/delete": [lambda: kafka_group_delete_call(KGROUP)],
    "share_group/heartbeat": [
        lambda: share_group_heartbeat_call(
            KEYS.share_group("g"),
            now_ms=1,
            session_timeout_ms=45_000,
            member_id="m",
            member_epoch=0,
            subscribed_topics=["t"],
        ),
        lambda: share_group_heartbeat_call(
            KEYS.share_group("g"),
            now_ms=1,
            session_timeout_ms=45_000,
            member_id="m",
            member_epoch=3,
            subscribed_topics=None,
        ),
    ],
    "share_group/acquire": [
        lambda: share_group_acquire_call(
            KEYS.partition("t", 0),
            consumer_group=KEYS.share_consumer_group("g"),
            member_id="m",
            settings=ShareSettings.of({}),
            max_records=500,
            sequence_bits=10,
        )
    ],
    "share_group/acknowledge": [
        lambda: share_group_acknowledge_call(
            KEYS.partition("t", 0),
            consumer_group=KEYS.share_consumer_group("g"),
            member_id="m",
            lock_ms=30_000,
            sequence_bits=10,
            batches=[],
        ),
        lambda: share_group_acknowledge_call(
            KEYS.partition("t", 0),
            consumer_group=KEYS.share_consumer_group("g"),
            member_id="m",
            lock_ms=30_000,
            sequence_bits=10,
            batches=[AckBatch(1024, 2048, [1]), AckBatch(4096, 4098, [1, 0, 3])],
        ),
    ],
    "share_group/release": [
        lambda: share_group_release_call(
            KEYS.partition("t", 0),
            consumer_group=KEYS.share_consumer_group("g"),
            member_id="m",
            lock_ms=30_000,
        )
    ],
    "share_group/offsets_describe": [lambda: share_group_offsets_describe_call(KEYS, "g", "t", 0)],
    "share_group/offsets_alter": [lambda: share_group_offsets_alter_call(KEYS, "g", "t", 0, 5, 10)],
    "share_group/offsets_delete": [lambda: share_group_offsets_delete_call(KEYS, "g", "t", 0)],
    "kafka_group/consumer_heartbeat": [
        lambda: kafka_group_consumer_heartbeat_call(
            KGROUP,
            session_timeout_ms=45_000,
            member_id="m",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            client_id="c",
            client_host="/h",
            rebalance_timeout_ms=-1,
            subscribed_topics=["t", "t2"],
            subscription=Subscription(("t",), "t2|t3"),
            server_assignor=None,
            owned=None,
            partition_counts={"t": 3},
        )
    ],
    "kafka_group/consumer_target": [
        lambda: kafka_group_consumer_target_call(
            KGROUP,
            session_timeout_ms=45_000,
            group_epoch=2,
            target={"m": {"t": [0, 1, 2]}},
            assignor="uniform",
            member_id="m",
            owned={"t": [0]},
            full=False,
        )
    ],
    "kafka_group/consumer_describe": [lambda: kafka_group_consumer_describe_call(KGROUP)],
    "kafka_group/v1_live": [lambda: kafka_group_v1_live_call(GROUP.keys.members, 10_000)],
    "kafka_group/offset_commit": [
        lambda: kafka_group_offset_commit_call(GROUP.keys, "7", {0: (42, "", -1), 1: (9, "m", 3)})
    ],
    "kafka_group/offset_fetch": [lambda: kafka_group_offset_fetch_call(GROUP.keys, "7", [0, 1])],
    "kafka_group/offset_delete": [lambda: kafka_group_offset_delete_call(GROUP.keys, [0])],
    "kafka_group/txn_offset_commit": [
        lambda: kafka_group_txn_offset_commit_call(
            KGROUP, TxnCommitter(7, 0), {"t": {0: (42, None, -1), 1: (43, "m", 5)}}
        ),
        lambda: kafka_group_txn_offset_commit_call(KGROUP, TxnCommitter(7, 0, "c-1", 3), {}),
    ],
    "kafka_group/txn_offset_end": [
        lambda: kafka_group_txn_offset_end_call(KGROUP, 7, 0, 604_800_000)
    ],
    "kafka_group/txn_offset_write": [
        lambda: kafka_group_txn_offset_write_call(GROUP.keys, [PENDING]),
    ],
    "kafka_group/txn_offset_clear": [
        lambda: kafka_group_txn_offset_clear_call(KGROUP, [PENDING]),
    ],
    "kafka/produce": [
        lambda: kafka_produce_call(PART, [RECORD, (None, b"v", 5, [])]),
        lambda: kafka_produce_call(
            PART, [RECORD], producer_id=3, producer_epoch=0, base_sequence=0
        ),
        lambda: kafka_produce_call(PART, [RECORD], compaction=PART.keys.compaction()),
        lambda: kafka_produce_call(
            PART, [RECORD], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True
        ),
    ],
    "kafka/producer_id": [lambda: kafka_producer_id_call(KEYS)],
    "kafka/leader_epoch": [lambda: kafka_leader_epoch_call(KEYS.kafka_leader_epochs, "f" * 40)],
    "offsets_topic/append": [
        lambda: offsets_topic_append_call(PART, [b"k", b"v", 5, b"k2", b"", 6], []),
        lambda: offsets_topic_append_call(PART, [b"k", b"v", 5], PART.keys.compaction()),
    ],
    "txn/add": [lambda: txn_add_call(PART, 3, 0)],
    "txn/marker": [
        lambda: txn_marker_call(PART, 3, 0, commit=True),
        lambda: txn_marker_call(PART, 3, 1, commit=False),
    ],
    "kafka/register": [lambda: kafka_register_call(KEYS.kafka_brokers, "pod", "h:9092", 10_000)],
    "kafka/brokers": [lambda: kafka_brokers_call(KEYS.kafka_brokers)],
    "spark/sink_append": [
        lambda: spark_sink_append_call(
            PART, KEYS.sink_markers("t", 0), "w:0", 1, 0, [Record(None, None, b"k", b"v")]
        ),
        lambda: spark_sink_append_call(
            PART, KEYS.sink_markers("t", 0), "", 0, 0, [], PART.keys.compaction()
        ),
    ],
    "spark/commit": [lambda: spark_commit_call(GROUP.keys, [(0, 42), (1, 7)])],
    "txn_coord/init": [lambda: txn_coord_init_call(TXN, "tx", 60_000, 7, -1, -1, 5000)],
    "txn_coord/add": [
        lambda: txn_coord_add_call(TXN, 7, 0, ADD_PARTITIONS, ["t\t0", "t\t1"]),
        lambda: txn_coord_add_call(TXN, 7, 0, VERIFY, []),
    ],
    "txn_coord/end": [lambda: txn_coord_end_call(TXN, 7, 0, True, 5000)],
    "txn_coord/complete": [lambda: txn_coord_complete_call(TXN, 7, 0, "PrepareCommit")],
    "txn_coord/describe": [lambda: txn_coord_describe_call(TXN)],
    "txn_coord/tick": [lambda: txn_coord_tick_call(TXN, 5000, 604_800_000)],
    "txn_coord/index_touch": [lambda: txn_coord_index_touch_call(KEYS.txn_index, "tx", 5000, 5000)],
    "txn_coord/index_settle": [lambda: txn_coord_index_settle_call(KEYS.txn_index, "tx", 12.0, -1)],
    "users/scram_alter": [
        lambda: users_scram_alter_call(KEYS, "u", "SCRAM-SHA-256", "SCRAM-SHA-256$4096$..."),
        lambda: users_scram_alter_call(KEYS, "u", "SCRAM-SHA-512", ""),
    ],
    "replicator/tick": [
        lambda: replicator_tick_call(KEYS.replicator_leases(16), "pod", 10_000, release=False),
        lambda: replicator_tick_call(KEYS.retention_lease, "pod", 10_000, release=True),
    ],
}


def _code(text: str) -> str:
    """Lua without its comments."""
    return re.sub(r"--.*", "", text)


def test_every_script_has_a_sample_call() -> None:
    assert sorted(SAMPLE_CALLS) == scripts.names()


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_each_builder_passes_what_the_header_declares(name: str) -> None:
    script = scripts.load(name)
    for build in SAMPLE_CALLS[name]:
        command = build()
        assert command[:2] == ("EVALSHA", script.sha), "the builder calls another script"
        count = command[2]
        keys, args = command[3 : 3 + count], command[3 + count :]
        assert script.keys.accepts(len(keys)), f"{name}: {len(keys)} KEYS for {script.keys}"
        assert script.argv.accepts(len(args)), f"{name}: {len(args)} ARGV for {script.argv}"
        # Redis Cluster: every key of one call in one slot
        assert len({key_slot(k.encode()) for k in keys}) <= 1, f"{name}: keys in several slots"


PACKAGES = ("adapter", "bench", "mapping", "spark_connector")


def _loads() -> list[tuple[str, str, str]]:
    """(module path, constant, script name) of every ``scripts.load`` outside tests; a load
    anywhere but as a module constant fails here."""
    found = []
    for path in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        constants = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                constants[id(node.value)] = node
        for node in ast.walk(tree):
            call = node if isinstance(node, ast.Call) else None
            func = call.func if call is not None else None
            if not (isinstance(func, ast.Attribute) and func.attr == "load"):
                continue
            if not (isinstance(func.value, ast.Name) and func.value.id == "scripts"):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            assign = constants.get(id(call))
            assert assign is not None, f"{where}: scripts.load outside a module constant"
            (target,) = assign.targets
            assert isinstance(target, ast.Name), where
            (argument,) = call.args
            assert isinstance(argument, ast.Constant), f"{where}: a script named by a variable"
            found.append((str(path.relative_to(ROOT)), target.id, argument.value))
    return found


def test_every_script_is_loaded_by_exactly_one_module_constant() -> None:
    loads = _loads()
    counts = Counter(name for _, _, name in loads)
    assert {n: c for n, c in counts.items() if c > 1} == {}
    assert sorted(counts) == scripts.names()
    for path, constant, name in loads:
        # named after the script, with its builder beside it
        assert constant == name.replace("/", "_").upper(), f"{path}: {constant} for {name}"
        builder = f"{name.replace('/', '_')}_call"
        defined = {
            node.name
            for node in ast.parse((ROOT / path).read_text()).body
            if isinstance(node, ast.FunctionDef)
        }
        assert builder in defined, f"{path} loads {name} but defines no {builder}"


def test_headers_and_lib_files() -> None:
    """Scripts declare KEYS and ARGV once (load checks); the includes declare nothing and are
    never loaded on their own."""
    for name in scripts.names():
        script = scripts.load(name)
        assert script.keys.required or script.keys.variadic, f"{name} declares no KEYS"
    for path in (scripts.LUA_DIR / scripts.LIB).glob("*.lua"):
        assert not re.search(r"^-- (KEYS|ARGV):", path.read_text(), re.M), path.name
        assert f"{scripts.LIB}/{path.stem}" not in scripts.names()


def test_a_header_declares_required_optional_and_variadic_items() -> None:
    declared = scripts.header(
        "x", "-- KEYS: a, b, ...\n-- ARGV: c, d,\n--   [e]\n-- KEYS[1] prose is no header\n"
    )
    keys, argv = declared["KEYS"], declared["ARGV"]
    assert (keys.required, keys.optional, keys.variadic) == (("a", "b"), (), True)
    assert (argv.required, argv.optional, argv.variadic) == (("c", "d"), ("e",), False)
    assert [argv.accepts(n) for n in range(5)] == [False, False, True, True, False]
    assert keys.accepts(2) and keys.accepts(20) and not keys.accepts(1)
    none = scripts.header("x", "-- KEYS: none\n-- ARGV: ...\n")
    assert none["KEYS"].accepts(0) and not none["KEYS"].accepts(1) and none["ARGV"].accepts(0)
    for bad in ("-- KEYS: [a], b\n-- ARGV: none\n", "-- KEYS: a, ..., b\n-- ARGV: none\n"):
        with pytest.raises(ValueError, match="malformed"):
            scripts.header("x", bad)
    with pytest.raises(ValueError, match="no header line for ARGV"):
        scripts.header("x", "-- KEYS: a\n")


def test_includes_are_expanded_once_each_in_dependency_order(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "fam").mkdir()
    (tmp_path / "lib/base.lua").write_text("-- base\n")
    (tmp_path / "lib/left.lua").write_text("--! include lib/base.lua\n-- left\n")
    (tmp_path / "lib/right.lua").write_text("--! include lib/base.lua\n-- right\n")
    (tmp_path / "fam/s.lua").write_text(
        "--! include lib/left.lua\n--! include lib/right.lua\n-- s\nreturn 1\n"
    )
    assert scripts.expand("fam/s", tmp_path) == "-- base\n-- left\n-- right\n-- s\nreturn 1\n"
    (tmp_path / "lib/base.lua").write_text("--! include lib/right.lua\n-- base\n")
    with pytest.raises(ValueError, match="include cycle"):
        scripts.expand("fam/s", tmp_path)


def test_every_helper_is_defined_once_per_script() -> None:
    for name in scripts.names():
        defined = Counter(re.findall(r"local function (\w+)", _code(scripts.load(name).source)))
        assert {f: n for f, n in defined.items() if n > 1} == {}, name


def test_the_constants_come_from_python() -> None:
    source = scripts.load("kafka/produce").source
    prelude, _, rest = source.partition("\n")
    assert prelude.startswith("local K = {") and not re.search(r"\blocal K\b", rest)
    assert f"OUT_OF_ORDER_SEQUENCE_NUMBER = {kafka_errors.OUT_OF_ORDER_SEQUENCE_NUMBER}" in prelude
    assert f"INVALID_PRODUCER_EPOCH = {kafka_errors.INVALID_PRODUCER_EPOCH}" in prelude
    assert f"V1_NOT_LEADER = '{errors.NOT_LEADER}'" in prelude
    # only what a script reads: none of the group codes in a partition script
    assert "UNKNOWN_MEMBER_ID" not in prelude
    assert "local K" not in scripts.load("topic/grow").source
    with pytest.raises(ValueError, match="K.NOT_A_CONSTANT"):
        scripts.prelude("x", "return K.NOT_A_CONSTANT")
    assert all(name.isupper() for name in LUA_CONSTANTS)


def test_scripts_spell_no_error_code_themselves() -> None:
    """Error replies start with a V1 code from the prelude (one errors.from_script_error
    knows), and the Kafka group scripts answer codes by name, never as numbers."""
    for name in scripts.names():
        code = _code(scripts.load(name).source.partition("\n")[2])
        for reply in re.findall(r"redis\.error_reply\(([^)]*)\)", code):
            assert reply.startswith("K.V1_"), f"{name}: error_reply({reply})"
        if name.startswith("kafka_group/"):
            literal = re.findall(r"return \{(\d+)\}", code)
            assert literal == [], f"{name} answers error codes {literal} as numbers"
        if name == "kafka/produce":  # statuses 0 (appended) and 1 (a retry), else an error
            assert set(re.findall(r"return answer\((\d+),", code)) == {"0", "1"}
            # every answer through answer(), with the same fields (the log start last)
            assert re.findall(r"return \{(?!status,)", code) == []
