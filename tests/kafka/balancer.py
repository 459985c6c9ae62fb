"""A round-robin TCP load balancer in front of pods, standing in for the one a deployment
puts before pods that advertise its address: each new connection goes to the next pod, and
one whose port refuses is skipped (a killed pod). Run as a child process by the tests:

    python -m tests.kafka.balancer LOG_FILE LISTEN_PORT TARGET_PORT...

LOG_FILE gets the target port of every connection made, one a line. While a file
LOG_FILE.pin holds a target port, new connections go to that target first (a test puts one
client's connections on the pod it then kills). ``Balancer`` starts and steers it from a test.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path

from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.tls_proxy import pipe
from tests.support.waiting import port_open, wait_until


class Balancer:
    """This balancer as a test's child process, on a free port (pods advertise ``address``)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log = log_dir / "balancer.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, targets: list[int]) -> None:
        self.log.write_text("")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka.balancer", str(self.log), str(self.port),
             *map(str, targets)],
            cwd=ROOT,
        )  # fmt: skip
        wait_until(lambda: port_open(self.port))

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)

    def pin(self, target: int | None) -> None:
        """New connections go to port ``target`` first (None: round robin again)."""
        pin = Path(f"{self.log}.pin")
        if target is None:
            pin.unlink(missing_ok=True)
        else:
            pin.write_text(str(target))

    def connections(self, targets: list[int]) -> list[int]:
        """The target (its index in ``targets``) each connection went to, in order."""
        return [targets.index(int(line)) for line in self.log.read_text().split()]


async def main(log_file: str, port: int, targets: list[int]) -> None:
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    turn = itertools.cycle(range(len(targets)))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = next(turn)
        order = targets[first:] + targets[:first]
        pin = Path(f"{log_file}.pin")
        if pin.exists() and (pinned := int(pin.read_text())) in targets:
            order = [pinned, *(t for t in targets if t != pinned)]
        for target in order:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                continue
            with open(log_file, "a") as log:
                log.write(f"{target}\n")
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
            return
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    log_file, port, *targets = sys.argv[1:]
    asyncio.run(main(log_file, int(port), [int(t) for t in targets]))
