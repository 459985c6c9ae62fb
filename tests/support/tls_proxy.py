"""A TLS-terminating TCP proxy in front of a plain redis-server, standing in for a Redis
built with TLS (the local redis-server is not). Run as a child process by the tests:

    python -m tests.support.tls_proxy CERT KEY CLIENT_CA LISTEN_PORT TARGET_PORT
"""

from __future__ import annotations

import asyncio
import ssl
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction of a relayed connection until it ends (the balancer uses it too)."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(cert: str, key: str, client_ca: str, port: int, target: int) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)  # bad clients

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    cert, key, ca, port, target = sys.argv[1:6]
    asyncio.run(main(cert, key, ca, int(port), int(target)))
