"""XRANGE replies as the RESP bytes the batcher hands over (mapping/connection/raw_replies.py),
for the tests of the compiled walks that read them."""

from __future__ import annotations

from typing import Any

from mapping.connection.raw_replies import START, RawReply, raw_reply, scan_pure


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def as_reply(entries: list[Any]) -> RawReply:
    """``entries`` as the RESP bytes of Redis's XRANGE reply, as the batcher hands them."""
    data = b"*%d\r\n" % len(entries) + b"".join(
        b"*2\r\n" + bulk(entry_id) + b"*%d\r\n" % len(fields) + b"".join(map(bulk, fields))
        for entry_id, fields in entries
    )
    end, pending, last = scan_pure(data, 0, START, -1)
    assert (end, pending) == (len(data), ())
    reply = raw_reply(data, 0, end, last)
    assert reply is not None and reply.parsed() == entries
    return reply
