"""A Toxiproxy-compatible TCP fault proxy: toxiproxy-server 2.12's HTTP API and toxics, in asyncio.

Toxiproxy's own clients (toxiproxy-python, toxiproxy-go, toxiproxy-cli, curl) drive it unmodified.
Standalone: `python -m chaos.proxy.toxiproxy --port 8474` or `chaos proxy serve`. See docs/toxiproxy.md.
"""

from .api import VERSION, ToxiproxyServer
from .cli import serve

__all__ = ["VERSION", "ToxiproxyServer", "serve"]
