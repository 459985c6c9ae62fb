"""Produce's batches kept as sent (adapter/kafka/records.py ``decode_batches(keep_plain=True)``,
adapter/kafka/_produce.c): only a batch of plain records (uncompressed, CreateTime, not
transactional, no headers) is kept, every other is decoded as before, and whatever the
compiled check lets through decodes to the same records with aiokafka. The entries such a
batch becomes are checked against the decoded path in
tests/mapping/connection/test_append_module.py."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kafka import records as kafka_records
from adapter.kafka.records import HEADER_BYTES, CorruptBatch, decode_batches

pytestmark = pytest.mark.skipif(
    kafka_records.plain_records is None, reason="the compiled check was not built"
)

Record = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]


def _batch(records: list[Record], codec: int = 0, transactional: bool = False) -> bytes:
    pid, epoch, seq = (7, 0, 0) if transactional else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(2, codec, int(transactional), pid, epoch, seq, 1 << 30)
    for offset, (key, value, timestamp, headers) in enumerate(records):
        builder.append(offset, timestamp, key, value, headers)
    return bytes(builder.build())


records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.integers(0, 1 << 45),
        st.sampled_from([[], [], [("h", b"v")], [("null", None)]]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_only_plain_batches_are_kept_and_they_decode_the_same(batch: list[Record]) -> None:
    (kept,) = decode_batches(_batch(batch), keep_plain=True)
    plain = not any(headers for *_, headers in batch)
    assert (kept.raw is not None) is plain
    assert kept.count == len(batch)
    kept.decode()
    (decoded,) = decode_batches(_batch(batch))
    assert kept.records == decoded.records == [tuple(r) for r in batch]


def test_compressed_and_transactional_batches_are_decoded() -> None:
    plain = [(b"k", b"v", 1_700_000_000_000, [])]
    for data in (_batch(plain, codec=1), _batch(plain, transactional=True)):
        (batch,) = decode_batches(data, keep_plain=True)
        assert batch.raw is None and batch.records == [(b"k", b"v", 1_700_000_000_000, [])]
    (batch,) = decode_batches(_batch(plain), keep_plain=False)
    assert batch.raw is None


@settings(max_examples=300, deadline=None)
@given(records, st.data())
def test_what_the_check_lets_through_aiokafka_reads_alike(
    batch: list[Record], data: st.DataObject
) -> None:
    """Bytes of the records cut or changed anywhere: where the compiled check still calls
    them plain records, aiokafka reads that many records without headers."""
    body = bytearray(_batch([(k, v, t, []) for k, v, t, _ in batch])[HEADER_BYTES:])
    if data.draw(st.booleans()):
        body = body[: data.draw(st.integers(0, len(body)))]
    else:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    check = kafka_records.plain_records
    assert check is not None
    if check(memoryview(bytes(body)), len(batch)):
        header = bytearray(_batch([(None, b"", 0, [])])[:HEADER_BYTES])
        whole = bytes(header) + bytes(body)
        # a batch around them (CRC and length as a producer would write them)
        whole = _reframed(whole, len(batch))
        (read,) = decode_batches(whole)
        assert len(read.records) == len(batch)
        assert all(headers == [] for *_, headers in read.records)


def _reframed(batch: bytes, count: int) -> bytes:
    """``batch`` with its length, record count and CRC made right for its bytes."""
    data = bytearray(batch)
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    data[57:61] = count.to_bytes(4, "big")
    data[17:21] = calc_crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def test_a_corrupt_batch_is_still_refused() -> None:
    data = bytearray(_batch([(b"k", b"v", 5, [])]))
    data[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(CorruptBatch):
        decode_batches(bytes(data), keep_plain=True)


def test_timestamps_beyond_what_the_module_adds_are_decoded() -> None:
    far = 1 << 62
    for stamps in ([10**18, 10**18], [0, far + 5], [far, 0]):
        records = [(b"k", b"v", stamp, []) for stamp in stamps]
        (batch,) = decode_batches(_batch(records), keep_plain=True)
        assert batch.raw is None and batch.records == records
