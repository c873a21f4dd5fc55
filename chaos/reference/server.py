"""Process lifecycle of one replica: build the engine, listen, drain on SIGTERM, exit 0."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

from aiohttp import web

from .api import ReferenceAPI, ServerSettings
from .config import EngineConfig
from .engine.async_engine import AsyncEngine
from .engine.sequence import SamplingParams

log = logging.getLogger("chaos.reference")


class ServeError(RuntimeError):
    """A startup failure with a message that says what to do."""


def warm_up(engine: AsyncEngine) -> None:
    """One short generation so the first real request does not pay for lazy initialisation."""
    eng = engine.engine
    eng.generate([eng.tokenizer.encode("warm up")], SamplingParams(temperature=0.0, max_tokens=2))
    bm = eng.block_manager
    bm.prefix_queries = bm.prefix_hits = 0
    eng.num_prompt_tokens_total = eng.num_generation_tokens_total = 0


async def serve(settings: ServerSettings, config: EngineConfig, host: str, port: int, announce=print) -> int:
    t0 = time.monotonic()
    engine = AsyncEngine(config)
    warm_up(engine)
    engine.start()
    api = ReferenceAPI(settings, engine)
    runner = web.AppRunner(api.build_app(), handler_cancellation=True, access_log=None,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        engine.shutdown()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}. "
                         f"Is another server using the port? Choose another with --port (0 picks a free one).")
    bound_port = runner.addresses[0][1]
    m = config.model
    announce(f"chaos reference server {settings.replica_id} listening on http://{host}:{bound_port} "
             f"(model {settings.model_name}, {m.num_parameters() / 1e6:.1f}M parameters, "
             f"device {engine.engine.model_runner.device}, {config.num_kv_blocks} KV blocks of {config.block_size}, "
             f"max_model_len {config.max_model_len}, ready in {time.monotonic() - t0:.1f}s)")

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals_seen = []

    def on_signal(sig):
        signals_seen.append(sig)
        if len(signals_seen) == 1:
            api.draining = True  # /health turns 503 and new requests are refused
            log.info("signal %s: draining (up to %.0fs)", sig.name, settings.drain_timeout_s)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    await stop.wait()
    # Let in-flight requests finish, up to the drain timeout or a second signal.
    deadline = loop.time() + settings.drain_timeout_s
    while api.in_flight and len(signals_seen) < 2 and loop.time() < deadline:
        try:
            await asyncio.wait_for(api.idle.wait(), timeout=0.1)
        except asyncio.TimeoutError:
            pass
    unfinished = api.in_flight
    await runner.cleanup()
    engine.shutdown()
    if unfinished:
        log.warning("drain ended with %d requests still in flight", unfinished)
    return 0


def run(settings: ServerSettings, config: EngineConfig, host: str, port: int) -> int:
    def announce(line: str) -> None:
        print(line, flush=True)

    try:
        return asyncio.run(serve(settings, config, host, port, announce))
    except ServeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
