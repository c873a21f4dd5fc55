"""A proxy: its listener, its upstream, its toxics and its open connections."""

from __future__ import annotations

import asyncio
import errno
import socket

from .link import ClientSide, Connection
from .toxics import DOWNSTREAM, UPSTREAM, ApiError, Toxic


def split_hostport(addr: str) -> tuple[str, int]:
    """'host:port', '[v6]:port' or ':port' -> (host, port); ValueError when it is none of those."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        p = int(port) if port else 0
    except ValueError:
        raise ValueError(f"address {addr}: invalid port") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"address {addr}: invalid port")
    return host, p


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind(listen: str) -> tuple[socket.socket, str]:
    """A bound, listening socket for `listen` and the address the proxy then reports. A port of 0 is
    resolved to the one picked (wildcards as "[::]:PORT", like a Go listener); an explicit one is kept
    as written."""
    err_prefix = f"listen tcp {listen}"
    try:
        host, port = split_hostport(listen) if listen else ("", 0)
    except ValueError as e:
        raise ApiError(f"{err_prefix}: {e}", 500) from None
    candidates: list[tuple[int, tuple]] = []
    if host in ("", "0.0.0.0", "::"):
        if socket.has_ipv6:  # Go listens dual-stack on each of these and reports "[::]:PORT"
            candidates.append((socket.AF_INET6, ("::", port)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
        wildcard = True
    else:
        wildcard = False
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except socket.gaierror as e:
            raise ApiError(f"{err_prefix}: lookup {host}: {e.strerror}", 500) from None
        infos.sort(key=lambda i: i[0] != socket.AF_INET)  # IPv4 first, as Go resolves localhost
        candidates = [(fam, sa[:2]) for fam, _t, _p, _c, sa in infos]
    last: OSError | None = None
    for fam, sa in candidates:
        sock = socket.socket(fam, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # Go's listeners do too
            if fam == socket.AF_INET6 and wildcard:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sa)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            last = e
            if e.errno == errno.EADDRINUSE:
                break
            continue
        bound = sock.getsockname()
        if port != 0:
            shown = listen
        elif wildcard:
            shown = _fmt("::" if fam == socket.AF_INET6 else "0.0.0.0", bound[1])
        else:
            shown = _fmt(bound[0], bound[1])
        return sock, shown
    why = "address already in use" if last and last.errno == errno.EADDRINUSE else (
        last.strerror if last else "no address")
    raise ApiError(f"{err_prefix}: bind: {why}", 500)


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str):
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}  # creation order
        self.connections: set[Connection] = set()
        self.server: asyncio.base_events.Server | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.server is not None:
            return
        sock, shown = _bind(self.listen)
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: ClientSide(self), sock=sock)
        self.listen = shown
        self.enabled = True

    async def stop(self) -> None:
        """Close the listener and every open connection (new connections are refused)."""
        self.enabled = False
        server, self.server = self.server, None
        if server is not None:
            server.close()
        for conn in list(self.connections):
            conn.close()
        self.connections.clear()

    def upstream_addr(self) -> tuple[str, int]:
        return split_hostport(self.upstream)

    # -- toxics --------------------------------------------------------------------------------------------

    def toxics_in(self, direction: str) -> list[Toxic]:
        return [t for t in self.toxics.values() if t.direction == direction]

    def ordered_toxics(self) -> list[Toxic]:
        return self.toxics_in(UPSTREAM) + self.toxics_in(DOWNSTREAM)

    def add_toxic(self, toxic: Toxic) -> None:
        if toxic.name in self.toxics:
            raise ApiError("toxic already exists", 409)
        before = self.toxics_in(toxic.direction)
        self.toxics[toxic.name] = toxic
        # the real server restarts the toxic before the new one, which draws against its toxicity again
        self._notify(toxic.direction, frozenset({id(before[-1])}) if before else frozenset())

    def update_toxic(self, name: str, body) -> Toxic:
        tox = self.get_toxic(name)
        new = tox.updated(body)
        # in place: each connection's stage holds this object and reads its attributes per chunk
        tox.attributes, tox.toxicity = new.attributes, new.toxicity
        self._notify(tox.direction, frozenset({id(tox)}))  # restarted: it draws again on open connections
        return tox

    def remove_toxic(self, name: str) -> None:
        tox = self.get_toxic(name)
        del self.toxics[name]
        self._notify(tox.direction)

    def reset_toxics(self) -> None:
        dirs = {t.direction for t in self.toxics.values()}
        self.toxics.clear()
        for d in dirs:
            self._notify(d)

    def get_toxic(self, name: str) -> Toxic:
        try:
            return self.toxics[name]
        except KeyError:
            raise ApiError("toxic not found", 404) from None

    def _notify(self, direction: str, reroll=frozenset()) -> None:
        for conn in list(self.connections):
            conn.toxics_changed(direction, reroll)

    def to_json(self) -> dict:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled,
                "toxics": [t.to_json() for t in self.ordered_toxics()]}
