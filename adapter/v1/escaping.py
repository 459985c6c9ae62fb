"""Percent-escaping so that any byte string survives PRODUCE -> CONSUME.

Requests may carry ``%XX`` (two hex digits), which is decoded; any other ``%`` is literal.
Replies escape ``%``, ``,``, ASCII whitespace, ``|``, control bytes and every byte that is
not part of valid UTF-8, so a value never breaks the ``<o>:<v>,<o>:<v>`` list or the line.
"""

from __future__ import annotations

import re

from adapter.v1.protocol import ENCODING, ERRORS

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
# Bytes always escaped in replies: control bytes, space, '%', ',', '|', DEL.
_ALWAYS = frozenset(range(0x00, 0x21)) | {ord("%"), ord(","), ord("|"), 0x7F}
# Any byte that may need escaping (non-ASCII included): its absence is the common fast path.
_MAYBE_ESCAPED = re.compile(rb"[\x00-\x20%,|\x7f-\xff]")


def unescape(text: str) -> bytes:
    """Request text (possibly carrying surrogate-escaped raw bytes) -> the bytes it means."""
    raw = text.encode(ENCODING, ERRORS)
    if "%" not in text:  # (a raw byte that is a '%' arrives as '%' itself)
        return raw
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)


def escape(data: bytes, also: str = "") -> str:
    """Bytes -> text safe inside a reply (or request) token; ``also`` adds characters to
    escape (a client escapes ``:`` in keys)."""
    if not also and _MAYBE_ESCAPED.search(data) is None:
        return data.decode("ascii")
    extra = frozenset(also.encode())
    text = data.decode(ENCODING, ERRORS)
    if text.isascii() and not any(b in _ALWAYS or b in extra for b in data):
        return text
    out: list[str] = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not valid UTF-8
            out.append(f"%{code - 0xDC00:02X}")
        elif code < 0x80 and (code in _ALWAYS or code in extra):
            out.append(f"%{code:02X}")
        elif char.isspace() or not char.isprintable() and code < 0xA0:
            # Unicode whitespace and C1 controls would split or garble the token.
            out.extend(f"%{b:02X}" for b in char.encode(ENCODING))
        else:
            out.append(char)
    return "".join(out)
