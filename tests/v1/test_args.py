"""Argument validators shared by the handlers."""

from __future__ import annotations

import pytest

from adapter.v1.handlers import args
from mapping.core.errors import BAD_REQUEST, BadRequest


def test_expect_count() -> None:
    args.expect_count(["a", "b"], "USAGE", 2)
    args.expect_count(["a", "b", "c"], "USAGE", 2, 3)
    for argv in ([], ["a"], ["a", "b", "c", "d"]):
        with pytest.raises(BadRequest) as info:
            args.expect_count(argv, "X requires: <a> <b> [c]", 2, 3)
        assert info.value.code == BAD_REQUEST
        assert info.value.message == "X requires: <a> <b> [c]"


@pytest.mark.parametrize("name", ["a", "orders", "A-b_c.d", "9", "x" * 249, "..", "-"])
def test_valid_names(name: str) -> None:
    assert args.name(name, "topic") == name


@pytest.mark.parametrize(
    "name", ["", "x" * 250, "a:b", "a{b}", "a b", "a|b", "a/b", "é", "a*", "{t}", "a\x00"]
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(BadRequest, match="invalid topic"):
        args.name(name, "topic")


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("42", 42), ("-3", -3), ("007", 7)])
def test_integers(text: str, value: int) -> None:
    assert args.integer(text, "offset") == value


@pytest.mark.parametrize("text", ["", "abc", "1.5", "+1", " 1", "1e3", "0x10", "1" * 31, "--1"])
def test_bad_integers(text: str) -> None:
    with pytest.raises(BadRequest) as info:
        args.integer(text, "offset")
    assert info.value.message == "invalid offset"


def test_integer_minimum() -> None:
    assert args.integer("0", "partition", minimum=0) == 0
    with pytest.raises(BadRequest, match="invalid partition"):
        args.integer("-1", "partition", minimum=0)
