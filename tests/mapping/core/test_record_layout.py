"""The Lua scripts spell a record's stream-entry fields as mapping/core/records.py defines them:
every field name a script writes or compares is one of the module's, the short forms of
kafka/produce.lua write what ``record_items`` gives, and every such script names the module
as the owner of the names."""

from __future__ import annotations

import re

import pytest

from mapping.connection import scripts
from mapping.core import records

LUA = scripts.LUA_DIR
# The scripts that spell field names (the others append through lib/append.lua's helpers or
# copy entries whole).
SPELLING = (
    "lib/append.lua",
    "partition/produce.lua",
    "kafka/produce.lua",
    "partition/consume.lua",
    "partition/lag.lua",
    "txn/marker.lua",
    "offsets_topic/append.lua",
)


def _code(name: str) -> str:
    """The script without its comments."""
    return re.sub(r"--.*", "", (LUA / name).read_text())


def _arguments(text: str) -> list[str]:
    """The comma-separated arguments of a call whose text starts after its "(" (up to the
    matching ")")."""
    arguments, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        if char == "," and depth == 0:
            arguments.append(current.strip())
            current = ""
        else:
            current += char
    return [*arguments, current.strip()]


def _xadd_fields(code: str) -> list[list[str]]:
    """Per XADD call with its fields spelled out: its (field, value) items after the key and
    the id, a quoted string as its text, anything else as ``?``."""
    calls = []
    for match in re.finditer(r"redis\.call\('XADD',", code):
        items = _arguments(code[match.end() :])[2:]
        if len(items) == 1 and items[0].startswith("unpack("):
            continue  # a table of fields built elsewhere (checked below)
        quoted = [re.fullmatch(r"'([^']*)'", item) for item in items]
        calls.append([q.group(1) if q else "?" for q in quoted])
    return calls


def _compared_or_added(code: str) -> set[str]:
    """Field names a script compares a field to, or adds to a table of fields."""
    compared = re.findall(r"(?:fields|argv)\[[^\]]+\] == '([^']*)'", code)
    added = re.findall(r"fields\[#fields \+ 1\] = '([^']*)'", code)
    return {*compared, *added}


def _layout(key: bytes | None, value: bytes | None, timestamp: int) -> list[str]:
    """The entry a record gets through record_items and lib/append.lua: the lead items, the
    append time, the rest, the number; values that are field names kept (``null``'s)."""
    lead, items = records.record_items(key, value, timestamp, [])
    entry = [*items[:lead], records.APPEND_TIME, "?", *items[lead:], records.NUMBER, "?"]
    return [item if isinstance(item, str) else "?" for item in entry]


@pytest.mark.parametrize("name", SPELLING)
def test_every_field_a_script_spells_is_the_modules(name: str) -> None:
    code = _code(name)
    spelled = _compared_or_added(code)
    for fields in _xadd_fields(code):
        spelled |= {f for f in fields[::2]}
    assert spelled, f"{name} spells no field name: take it out of SPELLING"
    assert spelled <= records.FIELD_NAMES, f"{name}: {spelled - records.FIELD_NAMES}"
    assert "mapping/core/records.py" in (LUA / name).read_text(), f"{name} names no owner"


def _module_fields() -> set[str]:
    """The field names the streamadapter module writes (its ``field_texts``)."""
    source = (LUA.parent / "connection" / "append_module.c").read_text()
    match = re.search(r"field_texts\[FIELD_NAMES\] = \{(.*?)\};", source, re.S)
    assert match, "append_module.c has no field_texts"
    return set(re.findall(r'"([^"]*)"', match.group(1)))


def test_the_module_writes_the_layouts_names() -> None:
    assert _module_fields() <= records.FIELD_NAMES
    assert records.CREATE_DELTA in _module_fields()


def test_the_scripts_and_the_module_write_every_field_of_the_layout() -> None:
    written = set()
    for name in SPELLING:
        for fields in _xadd_fields(_code(name)):
            written |= set(fields[::2])
    appended = _compared_or_added(_code("lib/append.lua"))
    assert written | appended | _module_fields() == records.FIELD_NAMES
    # the scripts keep create_ts (a difference would cost them a Lua number's formatting)
    assert records.CREATE_DELTA not in written | appended


def test_the_v1_produce_writes_key_value_time_number() -> None:
    (fields,) = _xadd_fields(_code("partition/produce.lua"))
    assert fields[::2] == [records.KEY, records.VALUE, records.APPEND_TIME, records.NUMBER]
    assert _code("lib/append.lua").count(f"fields[#fields + 1] = '{records.NUMBER}'") == 1
    assert f"fields[#fields + 1] = '{records.APPEND_TIME}'" in _code("lib/append.lua")


def test_the_offsets_mirror_writes_what_record_items_gives() -> None:
    """offsets_topic/append.lua's records (a commit, a tombstone) carry their commit time
    as CreateTime, as a Kafka producer's record would."""
    tombstone, commit = _xadd_fields(_code("offsets_topic/append.lua"))
    assert tombstone == _layout(b"k", None, 5)
    assert commit == _layout(b"k", b"v", 5)


def test_the_short_forms_write_what_record_items_gives() -> None:
    code = _code("kafka/produce.lua")
    assert "local SHORT_NULL_KEY, SHORT_KEY_VALUE = K.SHORT_NULL_KEY, K.SHORT_KEY_VALUE" in code
    assert "form == SHORT_NULL_KEY" in code
    assert "form == SHORT_KEY_VALUE" in code
    # the constants the script compares with, in the prelude the loader writes
    prelude = scripts.load("kafka/produce").source.splitlines()[0]
    assert f"SHORT_NULL_KEY = '{records.SHORT_NULL_KEY}'" in prelude
    assert f"SHORT_KEY_VALUE = '{records.SHORT_KEY_VALUE}'" in prelude
    null_key, key_value = _xadd_fields(code)
    assert null_key == _layout(None, b"v", 5)
    assert key_value == _layout(b"k", b"v", 5)
    # and append_args sends those records in the short forms
    assert records.append_args([(None, b"v", 5, [])])[0] == records.SHORT_NULL_KEY
    assert records.append_args([(b"k", b"v", 5, [])])[0] == records.SHORT_KEY_VALUE
