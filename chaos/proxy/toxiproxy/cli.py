"""`chaos proxy serve`: run the Toxiproxy-compatible server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from chaos.common import is_loopback, run_event_loop, running_loop_name
from chaos.errors import InputError, counts_as, handled

DESCRIPTION = (
    "Run a Toxiproxy-compatible server: toxiproxy-server 2.12's HTTP API on --host:--port, and the proxies\n"
    "and toxics (latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data) it is asked for.\n"
    "Toxiproxy's own clients drive it unmodified. It runs until SIGTERM or SIGINT and then exits 0.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address of the HTTP API")
    p.add_argument("--port", type=int, default=8474, help="port of the HTTP API, 0 for a free one")
    p.add_argument("--config", metavar="FILE",
                   help="a JSON list of proxies ({name, listen, upstream, enabled}) to create at start, "
                        "like toxiproxy-server -config")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host that is not loopback (anyone who reaches the API can proxy anywhere)")


def register(sub, formatter) -> None:
    p = sub.add_parser("serve", formatter_class=formatter, help="a Toxiproxy-compatible server (HTTP API + TCP proxies)",
                       description=DESCRIPTION,
                       epilog="examples:\n  chaos proxy serve --port 8474\n"
                              "  chaos proxy serve --port 8474 --config proxies.json")
    add_arguments(p)
    p.set_defaults(func=run_args)


def run_args(args) -> int:
    if not is_loopback(args.host) and not args.allow_remote:
        print(f"error: --host {args.host} is not a loopback address: the API lets anyone who reaches it open "
              "proxies to anywhere; pass --allow-remote if that is what you want", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"error: --port {args.port} is out of range: give 0 to 65535", file=sys.stderr)
        return 2
    return serve(args.host, args.port, args.config)


def load_populate(populate: str) -> list:
    """`populate` as a proxy list: JSON text (starting with '[') or the path of a file holding it."""
    text = populate
    if not populate.lstrip().startswith("["):
        try:
            with open(populate, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"cannot read the proxy config {populate}: {e.strerror}") from None
    try:
        items = json.loads(text)
    except ValueError as e:
        raise ValueError(f"the proxy config {populate[:80]} is not JSON ({e}): give a JSON list of proxies") from None
    if not isinstance(items, list):
        raise ValueError(f"the proxy config {populate[:80]} is not a list: give a JSON list of proxies "
                         '([{"name": ..., "listen": ..., "upstream": ...}])')
    return items


@handled
def serve(host: str = "127.0.0.1", port: int = 8474, populate: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then return 0. `populate`: a proxy list to create first, as JSON text or
    the path of a JSON file (toxiproxy-server's -config). 1 when the API cannot listen, 2 for a config that
    cannot be read."""
    items = None
    if populate is not None:
        with counts_as(InputError, ValueError):
            items = load_populate(populate)
    return run_event_loop(_serve(host, port, items))


async def _serve(host: str, port: int, items: list | None) -> int:
    from .api import ToxiproxyServer
    from .toxics import ApiError

    server = ToxiproxyServer(host, port)
    try:
        await server.start()
    except OSError as e:
        print(f"error: cannot listen on {host}:{port}: {e.strerror or e}: choose another --port",
              file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if items is not None:
            try:
                made = await server.populate_list(items)
                print(f"populated {len(made)} proxies from the config", file=sys.stderr)
            except ApiError as e:
                # like toxiproxy-server: a bad config is reported and the server keeps running
                print(f"error: populating from the config failed: {e.message}", file=sys.stderr)
        print(f"toxiproxy-compatible API listening on {server.url} (event loop {running_loop_name()})", flush=True)
        await stop.wait()
    finally:
        await server.stop()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.proxy.toxiproxy", description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
    return run_args(p.parse_args(argv))
