"""The Toxiproxy HTTP API, driven with Toxiproxy's own Python client (toxiproxy-python), for any server that
speaks it: a real toxiproxy-server the user runs, one the run starts from a binary, or the bundled one.

The client keeps its server's address in class attributes and sets no timeout on its requests, so every call
here takes one lock (two servers in one process never mix up) and runs with a deadline: a server that stops
answering fails the fault with a clear error instead of hanging the run.
"""

from __future__ import annotations

import threading
from urllib.parse import urlparse

from ..errors import SetupError

CALL_TIMEOUT_S = 10.0
_lock = threading.Lock()


class ToxiproxyError(SetupError, RuntimeError):
    pass


class ToxiproxyAPI:
    def __init__(self, url: str):
        u = urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise ToxiproxyError(f"the Toxiproxy API must be an http:// URL with a host, got {url!r}")
        self.url = f"http://{u.hostname}:{u.port or 8474}"
        self.host, self.port = u.hostname, u.port or 8474

    def _call(self, what: str, fn):
        box: dict = {}

        def go():
            from toxiproxy import Toxiproxy

            try:
                with _lock:
                    server = Toxiproxy()
                    server.update_api_consumer(self.host, self.port)
                    box["value"] = fn(server)
            except Exception as e:  # noqa: BLE001 - handed to the caller's thread below
                box["error"] = e

        t = threading.Thread(target=go, name="toxiproxy-api", daemon=True)
        t.start()
        t.join(CALL_TIMEOUT_S)
        if t.is_alive():
            raise ToxiproxyError(f"the Toxiproxy API at {self.url} did not answer {what} within {CALL_TIMEOUT_S:g}s")
        if "error" in box:
            e = box["error"]
            detail = e.args[0].decode(errors="replace").strip() if e.args and isinstance(e.args[0], bytes) else e
            raise ToxiproxyError(f"Toxiproxy API at {self.url}: {what} failed: {type(e).__name__}: {detail}") from e
        return box.get("value")

    def version(self) -> str:
        def get(server):
            if not server.running():
                raise ToxiproxyError("nothing listens there")
            v = server.version()
            return v.decode(errors="replace").strip() if isinstance(v, bytes) else str(v)
        return self._call("GET /version", get)

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> str:
        """Returns the address it listens on, as the server resolved it (127.0.0.1:PORT)."""
        return self._call(f"create proxy {name}",
                          lambda s: s.create(upstream=upstream, name=name, listen=listen).listen)

    def delete_proxy(self, name: str) -> bool:
        def delete(server):
            proxy = server.get_proxy(name)
            return bool(proxy and proxy.destroy())
        return self._call(f"delete proxy {name}", delete)

    def add_toxic(self, proxy: str, name: str, type_: str, stream: str, toxicity: float, attributes: dict) -> None:
        def add(server):
            p = server.get_proxy(proxy)
            if p is None:
                raise ToxiproxyError(f"no proxy {proxy!r}")
            p.add_toxic(name=name, type=type_, stream=stream, toxicity=toxicity, attributes=attributes)
        self._call(f"add toxic {name} to {proxy}", add)

    def remove_toxic(self, proxy: str, name: str) -> bool:
        """False when it (or its proxy) is already gone: reverting twice is fine."""
        def remove(server):
            p = server.get_proxy(proxy)
            if p is None or p.get_toxic(name) is None:
                return False
            return p.destroy_toxic(name)
        return self._call(f"remove toxic {name} from {proxy}", remove)

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        def toggle(server):
            p = server.get_proxy(proxy)
            if p is None:
                raise ToxiproxyError(f"no proxy {proxy!r}")
            p.enable() if enabled else p.disable()
        self._call(f"{'enable' if enabled else 'disable'} proxy {proxy}", toggle)
