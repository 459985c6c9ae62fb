"""Coverage-guided fuzzing (atheris) of the sans-I/O core: request parsing, line framing
under every split, and the value escaping. Optional: ``pip install -e .[fuzz]``, then

    python -m tests.v1.atheris_protocol -runs=200000

(test_fuzz_atheris.py runs a short bounded session when atheris is installed).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from adapter.v1 import protocol
    from adapter.v1.escaping import escape, unescape

LIMIT = 64


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cut = fdp.ConsumeIntInRange(0, 1 << 16)
    stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    # parsing: a request or a ParseError, never anything else
    for line in stream.split(b"\n"):
        try:
            request = protocol.parse_request(line)
        except protocol.ParseError:
            continue
        assert request.correlation_id and request.command
    # framing does not depend on where the bytes were split
    whole, pieces = protocol.LineFramer(LIMIT), protocol.LineFramer(LIMIT)
    at = cut % (len(stream) + 1)
    assert whole.feed(stream) == pieces.feed(stream[:at]) + pieces.feed(stream[at:])
    assert whole.overflowed == pieces.overflowed
    # escaping round-trips any bytes and never leaves a separator in the text
    text = escape(stream)
    assert unescape(text) == stream
    assert not any(c in text for c in "|, \n\r\t")


def main(argv: list[str]) -> None:
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
