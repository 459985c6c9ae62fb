"""kafkajs 2.2.4 (npm), the pure-JavaScript client most Node.js services use, against two
pods: ``kafkajs/client.js`` runs a scenario and prints what kafkajs was answered; the records
are checked through V1 on the pods. kafkajs sends its own versions (Produce v7, Fetch v11,
JoinGroup v5, its leader-side round-robin assignor over the classic protocol), has SASL
clients of its own (PLAIN, SCRAM-SHA-256/512) and reports the Produce answer's log start
offset to the application. ``tools/bootstrap.sh`` installs it into
``build/kafkajs``; the tests skip where Node.js or that install is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.pods import RF1, Pod, plain_client
from tests.support.users import add_redis_users

NODE_MODULES = ROOT / "build" / "kafkajs" / "node_modules"
CLIENT = Path(__file__).parent / "kafkajs" / "client.js"
KEYS = {f"value-{i}": f"key-{i}" for i in range(12)}  # the group scenario's records
USER, PASSWORD = "node", "kafkajs's pass:word="


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.skip("Node.js is not installed")
    if not (NODE_MODULES / "kafkajs" / "package.json").is_file():
        pytest.skip("kafkajs is not installed (tools/bootstrap.sh installs it with npm)")
    return path


def _run(
    node: str, scenario: str, topic: str, pods: tuple[Pod, ...], **env: str
) -> dict[str, list[Any]]:
    """The scenario's events, by name, in the order printed (``env``: added to its
    environment)."""
    bootstrap = ",".join(pod.bootstrap for pod in pods)
    result = subprocess.run(
        [node, str(CLIENT), scenario, topic, bootstrap],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES), **env},
    )
    assert result.returncode == 0, f"{scenario}: {result.stderr}\n{result.stdout}"
    events: dict[str, list[Any]] = {}
    for line in result.stdout.splitlines():
        event = json.loads(line) if line.startswith("{") else {}
        if "event" in event:  # (kafkajs's own log lines are JSON too)
            events.setdefault(event.pop("event"), []).append(event)
    return events


def test_a_group_of_two_shares_the_partitions_reads_every_record_once_and_commits(
    node: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    events = _run(node, "group", topic, kafka_pods)
    sent = events["sent"][0]["sent"]
    assert {s["errorCode"] for s in sent} == {0}
    # Kafka's Produce answer carries the log start offset: nothing removed, 0 (not -1)
    assert {s["logStartOffset"] for s in sent} == {"0"}
    members = events["member"]
    assert len(members) == 2 and sorted(m["leader"] for m in members) == [False, True]
    assert sorted(p for m in members for p in m["assigned"]) == [0, 1]
    with b.client() as client:
        log = {p: client.consume(topic, p, 0).records for p in (0, 1)}
    written = {(p, str(o), KEYS[v.decode()], v.decode()) for p, rs in log.items() for o, v in rs}
    assert len(written) == 12
    read = [tuple(r[f] for f in ("partition", "offset", "key", "value"))
            for m in members for r in m["messages"]]  # fmt: skip
    assert sorted(read) == sorted(written)  # each record once, by the member holding it
    for member in members:
        assert {r["partition"] for r in member["messages"]} <= set(member["assigned"])
    next_offsets = {p: str(rs[-1][0] + 1) for p, rs in log.items()}
    committed = {c["partition"]: c["offset"] for c in events["committed"][0]["offsets"]}
    assert committed == next_offsets
    with a.client() as client:
        assert {p: client.committed(f"{topic}-group", topic, p) for p in (0, 1)} == {
            p: int(o) for p, o in next_offsets.items()
        }
    # kafkajs's resetOffsets commits -2, then -1: stored as the positions they name
    reset = events["reset"][0]
    assert {r["partition"]: r["offset"] for r in reset["earliest"]} == {
        p: str(rs[0][0]) for p, rs in log.items()
    }
    assert {r["partition"]: r["offset"] for r in reset["latest"]} == next_offsets
    assert events["described"] == [{"state": "Empty", "protocolType": "consumer"}]
    listed = events["listed"][0]["groups"]
    assert listed == [{"groupId": f"{topic}-group", "protocolType": "consumer"}]
    ends = {o["partition"]: (o["low"], o["high"]) for o in events["topic_offsets"][0]["offsets"]}
    assert ends == {p: (str(rs[0][0]), next_offsets[p]) for p, rs in log.items()}


def test_consume_transform_produce_commits_the_offsets_with_the_records(
    node: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    events = _run(node, "transaction", topic, kafka_pods)
    committed = events["committed"][0]
    assert [c["offset"] for c in committed["offsets"]] == [str(int(committed["last"]) + 1)]
    copied = [{"key": f"key-{i}", "value": f"copied value-{i}"} for i in range(5)]
    # read committed: the aborted transaction's record is never read, here or through V1
    expected = [*copied, {"key": "after", "value": "read"}]
    assert events["read"][0]["read"] == expected
    with kafka_pods[1].client() as client:
        values = [v for _, v in client.consume(f"{topic}-out", 0, 0).records]
    assert values == [r["value"].encode() for r in expected]


def test_delete_records_moves_the_log_start_the_producer_is_answered(
    node: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    trimmed = _run(node, "trim", topic, kafka_pods)["trimmed"][0]
    assert trimmed["first"]["logStartOffset"] == "0"
    assert trimmed["after"]["logStartOffset"] == trimmed["cut"]
    assert trimmed["offsets"][0]["low"] == trimmed["cut"]
    with kafka_pods[0].client() as client:
        offsets = [o for o, _ in client.consume(topic, 0, 0).records]
    assert offsets[0] == int(trimmed["cut"]) and len(offsets) == 2


@pytest.fixture(scope="module")
def sasl_pod(redis_url: str) -> Iterator[Pod]:
    """A pod whose users are in Redis (``adapter user add``): SASL on its Kafka listener."""
    prefix = f"kafkajs-sasl-{uuid.uuid4().hex[:8]}"
    add_redis_users(redis_url, prefix, {USER: PASSWORD})
    pod = Pod(redis_url, *RF1, "--key-prefix", prefix, "--auth-redis", connect=plain_client)
    pod.start()
    yield pod
    pod.stop()


@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-256", "scram-sha-512"])
def test_kafkajs_own_sasl_clients_log_in_and_a_wrong_password_is_refused(
    node: str, sasl_pod: Pod, topic: str, mechanism: str
) -> None:
    events = _run(
        node, "sasl", topic, (sasl_pod,),
        KAFKAJS_SASL_MECHANISM=mechanism, KAFKAJS_SASL_USER=USER, KAFKAJS_SASL_PASSWORD=PASSWORD,
    )  # fmt: skip
    sent = events["sent"][0]["sent"]
    assert sent["errorCode"] == 0
    assert events["refused"][0]["error"] == "KafkaJSSASLAuthenticationError"
    with sasl_pod.client() as client:
        client.auth(USER, PASSWORD)
        stored = client.consume(topic, sent["partition"], 0).records
    assert [(str(o), v) for o, v in stored] == [(sent["baseOffset"], mechanism.encode())]
