"""`chaos reference gateway`: listen, check upstreams, drain on SIGTERM, exit 0."""

from __future__ import annotations

import asyncio
import signal
import sys

from aiohttp import web

from .app import Gateway
from .settings import GatewaySettings


async def serve(settings: GatewaySettings, primaries, backups, host: str, port: int, drain_timeout: float) -> int:
    gw = Gateway(settings, primaries, backups)
    await gw.start()
    runner = web.AppRunner(gw.build_app(), handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        await gw.close()
        print(f"error: cannot listen on {host}:{port}: {e.strerror or e}; choose another --port (0 picks one)",
              file=sys.stderr)
        return 2
    bound = runner.addresses[0][1]
    print(f"chaos reference gateway listening on http://{host}:{bound} (primaries: "
          f"{', '.join(n for n, _ in primaries)}; backups: {', '.join(n for n, _ in backups) or 'none'})", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    seen = []

    def on_signal():
        seen.append(1)
        gw.draining = True
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stop.wait()
    deadline = loop.time() + drain_timeout
    while gw.in_flight and len(seen) < 2 and loop.time() < deadline:
        try:
            await asyncio.wait_for(gw.idle.wait(), 0.1)
        except asyncio.TimeoutError:
            pass
    await runner.cleanup()
    await gw.close()
    return 0


def parse_upstreams(items: list[str], prefix: str) -> list[tuple[str, str]]:
    out = []
    for i, item in enumerate(items):
        name, sep, url = item.partition("=")
        if not sep:
            name, url = f"{prefix}{i}", item
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"upstream {item!r}: write NAME=http://host:port or a URL")
        out.append((name, url))
    return out
