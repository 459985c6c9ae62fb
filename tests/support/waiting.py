"""Waiting in tests: poll a condition until it holds, bounded (an AssertionError after
``timeout``); or try an action again until it stops failing."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it returns something truthy (tests only, bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01
) -> Any:
    """`wait_until` for a test running on an event loop: the loop goes on while it polls."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def retried(
    action: Callable[[], T],
    errors: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    timeout: float = 10.0,
    interval: float = 0.2,
) -> T:
    """``action()``, tried again while it raises ``errors``: its result; past ``timeout`` its
    last error is raised as it is (where ``wait_until`` would lose its text)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except errors:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def port_open(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
