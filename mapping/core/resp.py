"""Commands as Redis receives them (RESP arrays of bulk strings), for the batcher's pipeline.

hiredis' ``pack_command`` copies every argument into a string of its own before it formats
the command: about 0.3 µs an argument, so a Kafka Produce's script call of 4,300 records (3
arguments each) cost the pod more to pack than to decode the batch and check it. Such a
call's per-record arguments can come already in RESP (``RespArgs``, built by
mapping/core/records.py's ``append_resp``), where what repeats is encoded once (a batch shares
its create time, its values their length); the batcher then packs only the head of the
command. Clients that take argument tuples (the cluster client, a redis-py pipeline) get the
plain arguments back (``plain``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import hiredis


class RespArgs:
    """``count`` arguments of a command, already in RESP (``data``), the last argument of a
    command tuple; ``args()`` gives them back as a list."""

    __slots__ = ("data", "count", "_args")

    def __init__(self, data: bytes, count: int, args: Callable[[], list[Any]]) -> None:
        self.data = data
        self.count = count
        self._args = args

    def args(self) -> list[Any]:
        return self._args()


def bulk(arg: bytes | str | int) -> bytes:
    """One argument as a RESP bulk string, as hiredis' packer spells it (an int in decimal)."""
    if isinstance(arg, str):
        arg = arg.encode()
    elif isinstance(arg, int):
        arg = b"%d" % arg
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def bulks(args: Iterable[bytes | str | int]) -> bytes:
    return b"".join(map(bulk, args))


def pack_command(command: tuple) -> bytes:
    """``command`` in RESP: hiredis' packer (C), the argument list of a trailing
    ``RespArgs`` appended as it is."""
    tail = command[-1] if command else None
    if not isinstance(tail, RespArgs):
        return hiredis.pack_command(command)
    head = hiredis.pack_command(command[:-1])
    header_end = head.index(b"\r\n") + 2  # "*<count>\r\n": the count grows by the tail's
    return b"".join(
        (b"*%d\r\n" % (len(command) - 1 + tail.count), memoryview(head)[header_end:], tail.data)
    )


def plain(command: tuple) -> tuple:
    """``command`` with a trailing ``RespArgs`` turned back into its arguments."""
    if command and isinstance(command[-1], RespArgs):
        return (*command[:-1], *command[-1].args())
    return command
