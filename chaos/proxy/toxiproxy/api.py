"""ToxiproxyServer: toxiproxy-server 2.12's HTTP API (routes, bodies, status codes, error wording) over aiohttp.

One catch-all handler routes by hand so that unknown paths, wrong methods and browsers get exactly the real
server's answers (404 `404 page not found`, an empty 405, 403 `User agent not allowed`) instead of aiohttp's.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import time

from aiohttp import web

from .proxy import Proxy
from .toxics import ApiError, Toxic, get_bool, get_str, parse_json, unmarshal_error

VERSION = "2.12.0"

_ROUTES: list[tuple[re.Pattern, dict[str, str]]] = [
    (re.compile(r"/reset"), {"POST": "reset"}),
    (re.compile(r"/proxies"), {"GET": "proxy_index", "POST": "proxy_create"}),
    (re.compile(r"/populate"), {"POST": "populate"}),
    (re.compile(r"/proxies/(?P<proxy>[^/]+)"),
     {"GET": "proxy_show", "POST": "proxy_update", "PATCH": "proxy_update", "DELETE": "proxy_delete"}),
    (re.compile(r"/proxies/(?P<proxy>[^/]+)/toxics"), {"GET": "toxic_index", "POST": "toxic_create"}),
    (re.compile(r"/proxies/(?P<proxy>[^/]+)/toxics/(?P<toxic>[^/]+)"),
     {"GET": "toxic_show", "POST": "toxic_update", "PATCH": "toxic_update", "DELETE": "toxic_delete"}),
    (re.compile(r"/version"), {"GET": "version"}),
]


_REQUEST_IDS = itertools.count(int.from_bytes(os.urandom(3), "big"))
_PROCESS_BYTES = os.urandom(5)
_BASE32HEX = "0123456789abcdefghijklmnopqrstuv"


def request_id() -> str:
    """An id shaped like the real server's (an xid: 12 bytes, seconds first, then 5 random bytes and a counter,
    in 20 lowercase base32hex characters), so logs and clients that keep it see the same kind of value."""
    raw = (int(time.time()) & 0xFFFFFFFF).to_bytes(4, "big") + _PROCESS_BYTES + \
        (next(_REQUEST_IDS) & 0xFFFFFF).to_bytes(3, "big")
    n = int.from_bytes(raw, "big") << 4  # 96 bits, padded to 100: 20 characters of 5 bits
    return "".join(_BASE32HEX[(n >> (95 - 5 * i)) & 31] for i in range(20))


async def _no_server_header(request, response) -> None:
    # Go's net/http sends no Server header; aiohttp adds one with its version, dropped here (headers are final
    # when this signal runs).
    response.headers.popall("Server", None)


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _json(obj, status: int = 200) -> web.Response:
    return web.Response(status=status, body=_dumps(obj), headers={"Content-Type": "application/json"})


def _text_error(text: str, status: int) -> web.Response:
    # what Go's http.Error writes: the text, a newline, text/plain
    return web.Response(status=status, body=(text + "\n").encode(),
                        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})


def _api_error(e: ApiError) -> web.Response:
    return _text_error(_dumps({"error": e.message, "status": e.status}).decode(), e.status)


def _proxy_fields(body, where: str) -> dict:
    if not isinstance(body, dict):
        raise unmarshal_error(body, where, "toxiproxy.Proxy")
    return {"name": get_str(body, "name", "Proxy.name"), "listen": get_str(body, "listen", "Proxy.listen"),
            "upstream": get_str(body, "upstream", "Proxy.upstream")}


class ToxiproxyServer:
    """The API on host:port (port 0 picks a free one: read `.port` after start()) and every proxy it makes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port {port!r} is not a TCP port: give 0 (a free one) to 65535")
        self.host = host
        self.port = port
        self.proxies: dict[str, Proxy] = {}
        self._lock = asyncio.Lock()  # one change at a time, as the real server's collection lock
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_response_prepare.append(_no_server_header)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        for p in list(self.proxies.values()):
            await p.stop()
        self.proxies.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- routing -------------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        for pattern, methods in _ROUTES:
            m = pattern.fullmatch(request.path)
            if m is None:
                continue
            name = methods.get(request.method)
            if name is None:
                return web.Response(status=405)  # gorilla/mux: a known path, another method: empty body
            # the real server's request-id middleware runs on a matched route only (gorilla/mux), before the
            # browser check
            answer = await self._route(request, name, m.groupdict())
            answer.headers["X-Toxiproxy-Request-Id"] = request_id()
            return answer
        return _text_error("404 page not found", 404)

    async def _route(self, request: web.Request, name: str, args: dict) -> web.StreamResponse:
        if request.headers.get("User-Agent", "").startswith("Mozilla/"):
            return _text_error("User agent not allowed", 403)
        try:
            return await getattr(self, name)(request, **args)
        except ApiError as e:
            return _api_error(e)

    def _proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise ApiError("proxy not found", 404) from None

    # -- proxies -------------------------------------------------------------------------------------------

    async def version(self, request):
        return web.Response(body=f'{{"version": "{VERSION}"}}\n'.encode(),
                            headers={"Content-Type": "application/json;charset=utf-8"})

    async def proxy_index(self, request):
        return _json({n: self.proxies[n].to_json() for n in sorted(self.proxies)})

    async def proxy_create(self, request):
        body = parse_json(await request.read())
        f = _proxy_fields(body, "Proxy")
        enabled = get_bool(body, "enabled", "Proxy.enabled", True)
        for key in ("name", "upstream"):
            if not f[key]:
                raise ApiError(f"missing required field: {key}", 400)
        async with self._lock:
            proxy = await self.add_proxy(f["name"], f["listen"], f["upstream"], enabled)
        return _json(proxy.to_json(), 201)

    async def add_proxy(self, name: str, listen: str, upstream: str, enabled: bool = True) -> Proxy:
        if name in self.proxies:
            raise ApiError("proxy already exists", 409)
        proxy = Proxy(name, listen, upstream)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def populate(self, request):
        try:
            done = await self.populate_list(parse_json(await request.read()))
        except ApiError as e:
            body = {"error": e.message, "status": e.status, "proxies": e.extra.get("proxies")}
            return _json(body, e.status)
        return _json({"proxies": done or None}, 201)

    async def populate_list(self, items) -> list[dict]:
        """Create or replace each proxy; validated first, then applied in order (not atomic: a bind error
        stops it with the proxies made so far in the error's `proxies`)."""
        if not isinstance(items, list):
            raise unmarshal_error(items, "", "[]struct { toxiproxy.Proxy; Enabled *bool }")
        wanted = []
        for i, item in enumerate(items, 1):
            f = _proxy_fields(item, "Proxy")
            f["enabled"] = get_bool(item, "enabled", "Proxy.enabled", True)
            for key in ("name", "upstream"):
                if not f[key]:
                    raise ApiError(f"missing required field: {key} at proxy {i}", 400)
            wanted.append(f)
        done: list[dict] = []
        async with self._lock:
            for f in wanted:
                old = self.proxies.get(f["name"])
                if old is not None and old.listen == f["listen"] and old.upstream == f["upstream"]:
                    done.append(old.to_json())
                    continue
                if old is not None:
                    await old.stop()
                    del self.proxies[f["name"]]
                try:
                    proxy = await self.add_proxy(f["name"], f["listen"], f["upstream"], f["enabled"])
                except ApiError as e:
                    raise ApiError(e.message, e.status, {"proxies": done or None}) from None
                done.append(proxy.to_json())
        return done

    async def proxy_show(self, request, proxy):
        return _json(self._proxy(proxy).to_json())

    async def proxy_update(self, request, proxy):
        p = self._proxy(proxy)
        body = parse_json(await request.read())
        if not isinstance(body, dict):
            raise unmarshal_error(body, "", "toxiproxy.Proxy")
        listen = get_str(body, "listen", "Proxy.listen", p.listen)
        upstream = get_str(body, "upstream", "Proxy.upstream", p.upstream)
        enabled = get_bool(body, "enabled", "Proxy.enabled", p.enabled)
        async with self._lock:
            if listen != p.listen or upstream != p.upstream:
                was = p.enabled
                await p.stop()
                p.listen, p.upstream = listen, upstream
                if was and enabled:
                    await p.start()
            if enabled and not p.enabled:
                await p.start()
            elif not enabled and p.enabled:
                await p.stop()
        return _json(p.to_json())

    async def proxy_delete(self, request, proxy):
        async with self._lock:
            p = self._proxy(proxy)
            await p.stop()
            del self.proxies[proxy]
        return web.Response(status=204)

    async def reset(self, request):
        async with self._lock:
            for p in self.proxies.values():
                if not p.enabled:
                    await p.start()
                p.reset_toxics()
        return web.Response(status=204)

    # -- toxics --------------------------------------------------------------------------------------------

    async def toxic_index(self, request, proxy):
        return _json([t.to_json() for t in self._proxy(proxy).ordered_toxics()])

    async def toxic_create(self, request, proxy):
        p = self._proxy(proxy)
        toxic = Toxic.from_json(parse_json(await request.read()))
        p.add_toxic(toxic)
        return _json(toxic.to_json())

    async def toxic_show(self, request, proxy, toxic):
        return _json(self._proxy(proxy).get_toxic(toxic).to_json())

    async def toxic_update(self, request, proxy, toxic):
        p = self._proxy(proxy)
        p.get_toxic(toxic)
        return _json(p.update_toxic(toxic, parse_json(await request.read())).to_json())

    async def toxic_delete(self, request, proxy, toxic):
        self._proxy(proxy).remove_toxic(toxic)
        return web.Response(status=204)
