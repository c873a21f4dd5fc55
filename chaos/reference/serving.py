"""What a replica and the gateway share as processes: listening with a clear error, draining on signals."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web


class ListenError(RuntimeError):
    pass


async def listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve app on host:port (0 picks a free port); (runner, bound port). A client that leaves cancels its
    handler, which is how an abandoned request is aborted upstream and in the engine."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await runner.cleanup()
        raise ListenError(f"cannot listen on {host}:{port}: {e.strerror or e}. Is another server using the port? "
                          f"Choose another with --port (0 picks a free one).") from None
    return runner, runner.addresses[0][1]


async def drain_on_signal(service, drain_timeout: float) -> int:
    """Wait for SIGTERM or SIGINT, then set service.draining (new work is refused with 503) and let in-flight
    requests finish, up to drain_timeout or a second signal. Returns how many were still in flight.

    service has: draining (bool), in_flight (int), idle (asyncio.Event set when nothing is in flight)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    seen: list[int] = []

    def on_signal():
        seen.append(1)
        service.draining = True
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stop.wait()
    deadline = loop.time() + drain_timeout
    while service.in_flight and len(seen) < 2 and loop.time() < deadline:
        try:
            await asyncio.wait_for(service.idle.wait(), 0.1)
        except asyncio.TimeoutError:
            pass
    return service.in_flight
