"""`chaos reference gateway`: listen, check upstreams, drain on SIGTERM, exit 0."""

from __future__ import annotations

import sys

from ...common import running_loop_name
from ..serving import ListenError, drain_on_signal, listen
from .app import Gateway
from .settings import GatewaySettings


async def serve(settings: GatewaySettings, primaries, backups, host: str, port: int, drain_timeout: float) -> int:
    gw = Gateway(settings, primaries, backups)
    await gw.start()
    try:
        runner, bound = await listen(gw.build_app(), host, port, header_timeout=settings.header_timeout_s,
                                     body_timeout=settings.body_timeout_s)
    except ListenError as e:
        await gw.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"chaos reference gateway listening on http://{host}:{bound} (primaries: "
          f"{', '.join(n for n, _ in primaries)}; backups: {', '.join(n for n, _ in backups) or 'none'}; event loop {running_loop_name()})", flush=True)
    await drain_on_signal(gw, drain_timeout)
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
