"""A group id's part of the Redis keys (``mapping.core.keys.group_part``): plain names unchanged,
any other string percent-encoded, reversible, never equal to another id's part, and safe
inside hash tags and the groups set's "<group> <topic>" entries."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from mapping.core.keys import (
    Keys,
    group_entry,
    group_name,
    group_part,
    parse_group_entry,
)

PART = re.compile(r"[A-Za-z0-9._%-]+")
PLAIN_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")
PLAIN = st.from_regex(r"[A-Za-z0-9._-]{1,249}", fullmatch=True)
# any string: surrogates included, as a wire decoder might hand them over
ANY = st.text(st.characters(codec=None), max_size=80)


def test_examples() -> None:
    assert group_part("orders-1.v2_x") == "orders-1.v2_x"
    assert group_part("roundrobin,range") == "roundrobin%2Crange"
    assert group_part("a b{c}:%é") == "a%20b%7Bc%7D%3A%25%C3%A9"
    assert group_part("") == "%"
    assert group_name("roundrobin%2Crange") == "roundrobin,range"
    assert group_name(b"%") == ""
    assert Keys("p").kafka_group("a{b}").meta == "p:kgroup:{a%7Bb%7D}:meta"
    assert Keys("p").group("a b", "t").offsets == "p:group:{a%20b:t}:offsets"


@given(PLAIN)
def test_plain_names_keep_their_keys(name: str) -> None:
    """Every V1 name, so existing deployments' keys stay where they are."""
    assert group_part(name) == name
    assert group_name(name) == name
    assert Keys("p").group(name, "t").meta == f"p:group:{{{name}:t}}:meta"


@given(ANY)
def test_round_trip(group: str) -> None:
    part = group_part(group)
    assert PART.fullmatch(part)
    assert group_name(part) == group
    assert group_name(part.encode()) == group


@given(ANY, PLAIN)
def test_no_collision_with_plain_names(group: str, plain: str) -> None:
    """A part holds '%' exactly when its id is not a plain name: the two sets of parts
    are disjoint, and within each the mapping is one to one (the round trip)."""
    part = group_part(group)
    assert ("%" in part) == (PLAIN_CHARACTERS.fullmatch(group) is None)
    if group != plain:
        assert part != group_part(plain)


@given(ANY, PLAIN)
def test_hash_tags_and_entries(group: str, topic: str) -> None:
    part = group_part(group)
    for key in (Keys("p").kafka_group(group).meta, Keys("p").group(group, topic).offsets):
        assert key.count("{") == 1 and key.count("}") == 1
    tag = Keys("p").group(group, topic).offsets.split("{")[1].split("}")[0]
    assert tag == f"{part}:{topic}"
    assert Keys("p").kafka_group(group).events.split("{")[1].split("}")[0] == part
    entry = group_entry(group, topic)
    assert entry.count(" ") == 1
    assert parse_group_entry(entry) == (group, topic)
    assert parse_group_entry(entry.encode()) == (group, topic)
