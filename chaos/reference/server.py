"""Process lifecycle of one replica: build the engine, listen, drain on SIGTERM, exit 0."""

from __future__ import annotations

import logging
import time

from .api import ReferenceAPI, ServerSettings
from .config import EngineConfig
from .engine.async_engine import AsyncEngine
from .engine.sequence import SamplingParams
from ..common import run_event_loop, running_loop_name
from ..errors import SetupError
from .serving import ListenError, drain_on_signal, listen

log = logging.getLogger("chaos.reference")


class ServeError(SetupError, RuntimeError):
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
    try:
        runner, bound_port = await listen(api.build_app(), host, port, header_timeout=settings.header_timeout_s,
                                          body_timeout=settings.body_timeout_s)
    except ListenError as e:
        api.close()
        engine.shutdown()
        raise ServeError(str(e)) from None
    m, mr = config.model, engine.engine.model_runner
    gpu = (f", decode kernel {mr.decode_kernel}, "
           f"{len(mr.graphs.graphs) if mr.graphs else 'no'} CUDA graphs") if mr.device.type == "cuda" else ""
    announce(f"chaos reference server {settings.replica_id} listening on http://{host}:{bound_port} "
             f"(model {settings.model_name}, {m.num_parameters() / 1e6:.1f}M parameters, "
             f"device {mr.device}{gpu}, {config.num_kv_blocks} KV blocks of {config.block_size}, "
             f"max_model_len {config.max_model_len}, event loop {running_loop_name()}, "
             f"ready in {time.monotonic() - t0:.1f}s)")

    unfinished = await drain_on_signal(api, settings.drain_timeout_s)
    await runner.cleanup()
    api.close()
    engine.shutdown()
    if unfinished:
        log.warning("drain ended with %d requests still in flight", unfinished)
    return 0


def run(settings: ServerSettings, config: EngineConfig, host: str, port: int) -> int:
    def announce(line: str) -> None:
        print(line, flush=True)

    return run_event_loop(serve(settings, config, host, port, announce))  # a ServeError: said by the command
