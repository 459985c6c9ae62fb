"""Fetch's read-ahead (adapter/kafka/fetch_ahead.py):

- on live pods: a consumer reading a topic in small fetches, sessionless or in an
  incremental fetch session, gets from a pod that reads ahead exactly the records, in the
  same bytes, that a pod without read-ahead answers, each once and in order, records
  appended meanwhile included (a partition with nothing read ahead is read afresh); the
  pod's metrics count the reads taken;
- the bookkeeping alone: a read ahead is taken once and only at its position, never after
  the leader epoch or the topic's settings changed or its lifetime passed, never beyond the
  byte bound, and what it holds is given back whichever way it goes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka import errors, fetch_ahead
from adapter.kafka.fetch_ahead import ReadAhead, Reader
from adapter.kafka.fetch_reads import Answer, Wanted
from adapter.kafka.records import next_offset
from adapter.kafka.versions import FETCH
from mapping.connection.embedded import free_port
from mapping.topic.topic_config import TopicConfig
from tests.support.kafka import RawKafka, batch, partition_records, produce_values
from tests.support.pods import RF1, scrape_metrics

VERSION = 12
SHARE = 2048  # a partition's bytes a Fetch: about 15 of these records


def call_fetch(
    raw: RawKafka, topic: str, positions: dict[int, int], session_id: int = 0, epoch: int = -1
) -> Any:
    """A Fetch v12 of ``positions`` (partition -> offset), SHARE bytes a partition:
    sessionless, ``epoch`` 0 creating a session, or an incremental fetch of session
    ``session_id`` naming the partitions whose position moved."""
    request = FETCH.request
    body = request[VERSION](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[request.FetchTopic(topic=topic, partitions=[
            request.FetchTopic.FetchPartition(
                partition=p, fetch_offset=o, log_start_offset=-1, partition_max_bytes=SHARE
            ) for p, o in positions.items()
        ])] if positions else [],
        forgotten_topics_data=[], rack_id="",
    )  # fmt: skip
    response = raw.call(FETCH, VERSION, body)
    assert response.error_code == errors.NONE
    return response


def fetch(raw: RawKafka, topic: str, positions: dict[int, int]) -> dict[int, Any]:
    """partition -> its data in a sessionless Fetch of ``positions``."""
    response = call_fetch(raw, topic, positions)
    return {part.partition_index: part for part in response.responses[0].partitions}


def reads_ahead(metrics_port: int) -> dict[str, float]:
    samples = scrape_metrics(metrics_port)
    return {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "adapter_kafka_fetch_reads_ahead_total"
    }


def held_bytes(metrics_port: int) -> float:
    return scrape_metrics(metrics_port)[("adapter_kafka_fetch_read_ahead_bytes", ())]


class TwoPods:
    """Two pods on one Redis, one reading ahead and one with ``--kafka-fetch-read-ahead-bytes
    0``, each with its metrics, and a topic of two partitions."""

    def __init__(self, start_pod: Any, redis_url: str, topic: str) -> None:
        self.ahead_metrics, self.plain_metrics = free_port(), free_port()
        self.ahead = start_pod(redis_url, *RF1, "--metrics-port", str(self.ahead_metrics))
        self.plain = start_pod(
            redis_url, *RF1, "--kafka-fetch-read-ahead-bytes", "0",
            "--metrics-port", str(self.plain_metrics),
        )  # fmt: skip
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.ahead.kafka_port}"})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)


def write_backlog(raw: RawKafka, topic: str, count: int) -> dict[int, list[bytes]]:
    """``count`` records in partition 0, 50 a Produce; partition 1 empty: partition ->
    the values written."""
    written: dict[int, list[bytes]] = {0: [b"%03d-" % i + b"v" * 96 for i in range(count)], 1: []}
    for start in range(0, count, 50):
        produce_values(raw, topic, 0, *written[0][start : start + 50])
    return written


def write_late(raw: RawKafka, topic: str, written: dict[int, list[bytes]]) -> None:
    """Records appended after the pod read ahead (partition 0) and a first write to
    partition 1, which had nothing read ahead: still read, each once."""
    more = [b"late-%d" % i for i in range(20)]
    produce_values(raw, topic, 0, *more)
    written[0] += more
    written[1] = [b"new-0", b"new-1", b"new-2"]
    produce_values(raw, topic, 1, *written[1])


def assert_each_once(
    got: dict[int, list[tuple[int, bytes]]], written: dict[int, list[bytes]]
) -> None:
    for p in (0, 1):
        offsets = [o for o, _ in got[p]]
        assert offsets == sorted(set(offsets))  # each once, in order
        assert [v for _, v in got[p]] == written[p]


def test_a_pod_reading_ahead_answers_what_one_without_does(
    start_pod: Any, redis_url: str, topic: str
) -> None:
    pods = TwoPods(start_pod, redis_url, topic)
    with RawKafka(pods.ahead.kafka_port) as one, RawKafka(pods.plain.kafka_port) as other:
        written = write_backlog(one, topic, 300)
        positions = {0: 0, 1: 0}
        got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        rounds = 0
        answering = True
        while answering or rounds < 2:
            answers = fetch(one, topic, positions)
            others = fetch(other, topic, positions)
            answering = False
            for p, part in answers.items():
                assert part.error_code == others[p].error_code == errors.NONE
                # the same records in the same bytes; a read ahead's high watermark may be
                # older than the other pod's, never newer
                assert bytes(part.records or b"") == bytes(others[p].records or b"")
                assert 0 < part.high_watermark <= others[p].high_watermark or not part.records
                records = partition_records(part)
                got[p] += [(r.offset, r.value) for r in records]
                if records:
                    positions[p] = records[-1].offset + 1
                    answering = True
            rounds += 1
            if rounds == 1:
                write_late(one, topic, written)
            if rounds == 2:  # partition 1 had nothing read ahead: read afresh, at once
                assert [v for _, v in got[1]] == written[1]
            assert rounds < 100
        assert_each_once(got, written)
    assert rounds > 15
    taken = reads_ahead(pods.ahead_metrics)
    assert taken["taken"] >= rounds - 3  # each Fetch after the first took partition 0's
    assert reads_ahead(pods.plain_metrics) == {"taken": 0, "dropped": 0}


def record_bytes(parts: dict[int, Any], partition: int) -> bytes:
    part = parts.get(partition)
    return b"" if part is None else bytes(part.records or b"")


class Session:
    """A consumer's incremental fetch session (KIP-227) on one pod: each Fetch names only
    the partitions whose position moved since the last, as kafka-python and the Java
    client send them."""

    def __init__(self, raw: RawKafka, topic: str) -> None:
        self.raw, self.topic = raw, topic
        self.session_id = self.epoch = 0
        self.told: dict[int, int] = {}  # partition -> the position the pod holds

    def fetch(self, positions: dict[int, int]) -> dict[int, Any]:
        """partition -> its data, for the partitions answered."""
        moved = {p: o for p, o in positions.items() if self.told.get(p) != o}
        response = call_fetch(self.raw, self.topic, moved, self.session_id, self.epoch)
        if self.epoch == 0:
            self.session_id = response.session_id
            assert self.session_id != 0
        assert response.session_id == self.session_id
        self.epoch += 1
        self.told.update(moved)
        parts = response.responses[0].partitions if response.responses else []
        assert all(part.error_code == errors.NONE for part in parts)
        return {part.partition_index: part for part in parts}


def test_fetch_sessions_read_ahead_too(start_pod: Any, redis_url: str, topic: str) -> None:
    pods = TwoPods(start_pod, redis_url, topic)
    with RawKafka(pods.ahead.kafka_port) as one, RawKafka(pods.plain.kafka_port) as other:
        written = write_backlog(one, topic, 200)
        sessions = Session(one, topic), Session(other, topic)
        positions = {0: 0, 1: 0}
        got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        rounds = 0
        while rounds < 2 or any([v for _, v in got[p]] != written[p] for p in (0, 1)):
            answers, others = (s.fetch(positions) for s in sessions)
            for p in (0, 1):
                # the same records in the same bytes (a partition left out: none)
                assert record_bytes(answers, p) == record_bytes(others, p)
                records = partition_records(answers[p]) if p in answers else []
                got[p] += [(r.offset, r.value) for r in records]
                if records:
                    positions[p] = records[-1].offset + 1
            rounds += 1
            if rounds == 1:
                write_late(one, topic, written)
            assert rounds < 100
        assert_each_once(got, written)
    assert rounds > 10
    taken = reads_ahead(pods.ahead_metrics)
    assert taken["taken"] >= rounds - 4  # each incremental Fetch took partition 0's
    assert reads_ahead(pods.plain_metrics) == {"taken": 0, "dropped": 0}
    # the last answer's read ahead is held, within its share; none on the other pod
    assert held_bytes(pods.ahead_metrics) in (SHARE, 2 * SHARE)
    assert held_bytes(pods.plain_metrics) == 0


# -- the bookkeeping alone


def batch_at(offset: int, values: list[bytes]) -> bytes:
    """A batch of ``values`` at base offset ``offset`` (outside what its CRC covers)."""
    return offset.to_bytes(8, "big", signed=True) + batch(list(values))[8:]


def test_the_offset_after_a_run_of_batches() -> None:
    records = batch_at(40, [b"a", b"b", b"c"]) + batch_at(50, [b"d"])
    assert next_offset(records) == 51
    assert next_offset(batch_at(7, [b"x"])) == 8


CONFIG = TopicConfig("t", 3, 1, 1)


def wanted(partition: int, offset: int, max_bytes: int = 1000) -> Wanted:
    return Wanted("t", partition, offset, max_bytes, CONFIG)


def answer_of(offset: int, count: int = 2) -> Answer:
    return Answer(errors.NONE, offset + count, 0, batch_at(offset, [b"v"] * count))


class Reads:
    """What ReadAhead.start starts: the (wanted, share) of each read, as finished tasks."""

    def __init__(self) -> None:
        self.started: list[tuple[Wanted, int]] = []

    async def __call__(self, w: Wanted, share: int) -> tuple[str, int]:
        self.started.append((w, share))
        return "read", w.offset


def run(body: Any) -> Any:
    return asyncio.run(body())


def test_a_read_ahead_is_taken_once_at_its_position() -> None:
    async def body() -> None:
        ahead, reads = ReadAhead(10_000), Reads()
        ahead.start(reads, [(wanted(0, 10), answer_of(10, 3)), (wanted(1, 0), answer_of(0))],
                    5000, False, 2, 7)  # fmt: skip
        await asyncio.sleep(0)
        assert [(w.partition, w.offset, share) for w, share in reads.started] == [
            (0, 13, 1000), (1, 2, 1000),
        ]  # fmt: skip
        assert ahead.held_bytes == 2000
        key = (("t", 0), 13, 1000, False, 2)
        assert ahead.take((("t", 0), 12, 1000, False, 2), CONFIG, 7) is None  # elsewhere
        assert ahead.take((("t", 0), 13, 1000, True, 2), CONFIG, 7) is None  # read_committed
        task = ahead.take(key, CONFIG, 7)
        assert task is not None and await task == ("read", 13)
        assert ahead.take(key, CONFIG, 7) is None  # once
        assert (ahead.taken, ahead.held_bytes) == (1, 1000)
        ahead.close()
        assert (ahead.dropped, ahead.held_bytes) == (1, 0)

    run(body)


def test_a_moved_epoch_other_settings_or_age_drop_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        ahead, reads = ReadAhead(10_000), Reads()
        answered = [(wanted(p, 0), answer_of(0)) for p in range(3)]
        ahead.start(reads, answered, 5000, False, 2, 7)
        assert ahead.take((("t", 0), 2, 1000, False, 2), CONFIG, 8) is None  # a failover
        other = replace(CONFIG, overrides=(("compression_type", "gzip"),))
        assert ahead.take((("t", 1), 2, 1000, False, 2), other, 7) is None
        monkeypatch.setattr(fetch_ahead, "LIFETIME_S", -1.0)
        assert ahead.take((("t", 2), 2, 1000, False, 2), CONFIG, 7) is None
        assert (ahead.taken, ahead.dropped, ahead.held_bytes) == (0, 3, 0)
        # expired ones are dropped when reads are next started, taken or not
        monkeypatch.setattr(fetch_ahead, "LIFETIME_S", 1.0)
        ahead.start(reads, answered[:1], 5000, False, 2, 7)
        monkeypatch.setattr(fetch_ahead, "LIFETIME_S", -1.0)
        ahead.start(reads, [(wanted(1, 5), answer_of(5))], 5000, False, 2, 7)
        assert ahead.dropped == 4 and ahead.held_bytes == 1000
        ahead.close()

    run(body)


def test_what_starts_no_read_ahead() -> None:
    async def body() -> None:
        reads = Reads()
        answered = [(wanted(0, 0), answer_of(0))]
        ReadAhead(0).start(reads, answered, 5000, False, 2, 7)  # off
        ReadAhead(10_000).start(reads, answered, 5000, False, 1, 7)  # magic 1 (v2-3)
        # the partitions' limits exceed the response's: the shares depend on the reads
        ReadAhead(10_000).start(reads, answered * 6, 5000, False, 2, 7)
        nothing = [
            (wanted(0, 0), Answer(errors.NONE, 0, 0, b"")),  # no records
            (wanted(1, 0), Answer(errors.OFFSET_OUT_OF_RANGE)),
            (Wanted("t", 2, 0, 1000), answer_of(0)),  # no such topic
            (replace(wanted(2, 0), refused=errors.UNSUPPORTED_VERSION), answer_of(0)),
        ]
        ReadAhead(10_000).start(reads, nothing, 5000, False, 2, 7)
        await asyncio.sleep(0)
        assert reads.started == []

    run(body)


def test_the_shares_held_stay_within_the_bound() -> None:
    async def body() -> None:
        ahead, reads = ReadAhead(2500), Reads()
        answered = [(wanted(p, 0), answer_of(0)) for p in range(3)]
        ahead.start(reads, answered, 5000, False, 2, 7)
        await asyncio.sleep(0)
        assert len(reads.started) == 2 and ahead.held_bytes == 2000
        ahead.start(reads, answered, 5000, False, 2, 7)  # the same positions: held already
        await asyncio.sleep(0)
        assert len(reads.started) == 2
        assert ahead.take((("t", 0), 2, 1000, False, 2), CONFIG, 7) is not None
        ahead.start(reads, answered[2:], 5000, False, 2, 7)  # room again for one
        await asyncio.sleep(0)
        assert len(reads.started) == 3 and ahead.held_bytes == 2000
        ahead.close()

    run(body)


def test_a_failed_read_ahead_is_no_ones_error() -> None:
    async def body() -> None:
        ahead = ReadAhead(10_000)

        async def failing(w: Wanted, share: int) -> None:
            raise ConnectionError("Redis went away")

        ahead.start(failing, [(wanted(0, 0), answer_of(0))], 5000, False, 2, 7)
        await asyncio.sleep(0.01)
        ahead.close()  # retrieves the exception: nothing is logged as never retrieved
        assert ahead.dropped == 1

    run(body)


def test_a_partition_left_untaken_waits_longer_each_time() -> None:
    reader = Reader()
    key = ("t", 0)
    assert reader.may_start(key) and reader.may_start(key)  # never dropped: every answer

    def held_back_after_a_drop() -> int:
        reader.dropped(key)
        held = 0
        while not reader.may_start(key):
            held += 1
        return held

    assert [held_back_after_a_drop() for _ in range(8)] == [2, 4, 8, 16, 32, 64, 64, 64]
    assert reader.may_start(("t", 1))  # another partition of the connection: its own record
    reader.taken(key)  # taken once: at once again
    assert reader.may_start(key) and reader.may_start(key)
    assert held_back_after_a_drop() == 2


def test_reads_ahead_tell_their_connection_whether_they_were_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        ahead, reads, reader = ReadAhead(10_000), Reads(), Reader()
        answered = [(wanted(p, 0), answer_of(0)) for p in range(2)]
        ahead.start(reads, answered, 5000, False, 2, 7, reader)
        await asyncio.sleep(0)
        assert ahead.take((("t", 0), 2, 1000, False, 2), CONFIG, 7) is not None
        monkeypatch.setattr(fetch_ahead, "LIFETIME_S", -1.0)  # partition 1's: never taken
        ahead.start(reads, [(wanted(0, 2), answer_of(2))], 5000, False, 2, 7, reader)
        assert ahead.dropped == 1
        monkeypatch.setattr(fetch_ahead, "LIFETIME_S", 10.0)
        # partition 0's was taken: it reads on; partition 1's is held back for two answers
        for _ in range(3):
            ahead.start(reads, [(wanted(1, 2), answer_of(2))], 5000, False, 2, 7, reader)
        await asyncio.sleep(0)
        assert [(w.partition, w.offset) for w, _ in reads.started] == [
            (0, 2), (1, 2), (0, 4), (1, 4),
        ]  # fmt: skip
        # taken: partition 1 reads on at once again
        assert ahead.take((("t", 1), 4, 1000, False, 2), CONFIG, 7) is not None
        ahead.start(reads, [(wanted(1, 4), answer_of(4))], 5000, False, 2, 7, reader)
        await asyncio.sleep(0)
        assert reads.started[-1][0].offset == 6
        ahead.close()  # the pod stops: that is no miss of the client's
        assert reader.may_start(("t", 1))

    run(body)
