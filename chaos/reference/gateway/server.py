"""`chaos reference gateway`: listen, check upstreams, drain on SIGTERM, exit 0."""

from __future__ import annotations

from ...common import running_loop_name
from ...http1.server import Server
from ..serving import drain_on_signal, listen_error
from .app import Gateway
from .settings import GatewaySettings

KEEPALIVE_S = 75.0  # an idle kept-alive client connection is closed after this (a replica's aiohttp default too)


async def serve(settings: GatewaySettings, primaries, backups, host: str, port: int, drain_timeout: float) -> int:
    gw = Gateway(settings, primaries, backups)
    await gw.start()
    http = Server(gw.handle, settings.header_timeout_s, KEEPALIVE_S, [("x-served-by", gw.name)])
    try:
        bound = await http.start(host, port)
    except OSError as e:
        await gw.close()
        raise listen_error(host, port, e) from None  # a SetupError: said by the command, exit 2
    print(f"chaos reference gateway listening on http://{host}:{bound} (primaries: "
          f"{', '.join(n for n, _ in primaries)}; backups: {', '.join(n for n, _ in backups) or 'none'}; event loop {running_loop_name()})", flush=True)
    await drain_on_signal(gw, drain_timeout)
    await http.close(timeout=1.0)
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
