"""A process's resources as Linux's /proc shows them: open file descriptors, CPU time,
memory, child processes and listening sockets."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds the process has used (all its threads; 0 once it is
    gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_cpu_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of every core of the machine since boot (/proc/stat): busy
    over a window divided by all over it is the machine's load, whoever caused it."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy / os.sysconf("SC_CLK_TCK"), (busy + idle + iowait) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cmdline(pid: int) -> bytes:
    """The process's arguments, NUL-separated (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            found += [int(child) for child in text.split()]
    return found


def listening(pid: int, port: int) -> bool:
    """The process holds a socket listening on TCP ``port`` (IPv4)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"
                and fields[9] in inodes):  # fmt: skip
            return True
    return False
