"""L4 proxy overhead and toxic accuracy: direct vs through the bundled Toxiproxy-compatible proxy (and a real
toxiproxy-server when TOXIPROXY_URL is set or toxiproxy-server is on PATH), measured side by side in one run.

    python bench/l4_proxy.py            # ~1 min on 2 cores
    python bench/l4_proxy.py --quick    # ~15 s
    git worktree add /tmp/base HEAD~1 && python bench/l4_proxy.py --baseline /tmp/base   # before and after

The upstream (keep-alive HTTP, SSE, downloads) runs in its own process; the client is blocking sockets in this
one. Every figure is the median over interleaved rounds of (through the proxy - direct) for that round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import _relay
from _table import print_table

# -- the upstream (run as a child process: --serve-upstream) --------------------------------------------------


async def _upstream_handler(r: asyncio.StreamReader, w: asyncio.StreamWriter):
    block = b"x" * 262144
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            if path.startswith("/bytes/"):
                n = int(path.split("/")[2])
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                for i in range(0, n, len(block)):
                    w.write(block[:min(len(block), n - i)])
                    await w.drain()
            elif path.startswith("/sse/"):
                _, _, n, gap = path.split("/")
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                for i in range(int(n)):
                    if i:
                        await asyncio.sleep(int(gap) / 1000)
                    w.write(b"data: %d\n\n" % i)
                    await w.drain()
                break
            else:
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        w.close()


async def _serve_upstream() -> None:
    srv = await asyncio.start_server(_upstream_handler, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


# -- clients ----------------------------------------------------------------------------------------------


class Conn:
    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.first = 0.0  # when the last answer's first bytes came

    def get(self, path: str = "/small") -> int:
        self.s.sendall(b"GET %s HTTP/1.1\r\nHost: b\r\n\r\n" % path.encode())
        self._fill()
        self.first = time.perf_counter()
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        got = len(self.buf)
        while got < n:
            got += len(self.s.recv(1 << 20))
        self.buf = b""
        return n

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def close(self):
        self.s.close()


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def pct(xs, q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def keepalive(port: int, n: int) -> list[float]:
    c = Conn(port)
    try:
        c.get()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.get()
            out.append(_ms(t0))
        return out
    finally:
        c.close()


def fresh(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = Conn(port)
        c.get()
        out.append(_ms(t0))
        c.close()
    return out


def sse(port: int, n: int = 64, gap: int = 5) -> tuple[float, list[float]]:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    s.sendall(b"GET /sse/%d/%d HTTP/1.1\r\nHost: b\r\n\r\n" % (n, gap))
    first, stamps, data = None, [], b""
    while chunk := s.recv(65536):
        now = time.perf_counter()
        data += chunk
        events = data.count(b"\n\n") - 1  # the head ends with a blank line too
        while len(stamps) < events:
            stamps.append(now)
    s.close()
    first = (stamps[0] - t0) * 1000 if stamps else float("nan")
    gaps = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
    return first, gaps


def download(port: int, size: int) -> float:
    c = Conn(port)
    try:
        t0 = time.perf_counter()
        c.get(f"/bytes/{size}")
        return size / (time.perf_counter() - t0)
    finally:
        c.close()


def download_after_first(port: int, size: int) -> float:
    """Bytes per second from the first byte of the answer to its last: what a toxic that only delays leaves."""
    c = Conn(port)
    try:
        c.get(f"/bytes/{size}")
        return size / (time.perf_counter() - c.first)
    finally:
        c.close()


# -- the engines ------------------------------------------------------------------------------------------


def api(port: int, method: str, path: str, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        data = r.read()
        return json.loads(data) if data else None


def _wait(port: int, proc) -> None:
    for _ in range(300):
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the proxy exited with {proc.returncode}")
        try:
            api(port, "GET", "/version")
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"no answer on port {port}")


def start_engines(baselines=()) -> tuple[dict[str, int], list[subprocess.Popen]]:
    """The bundled server of this checkout ("bundled"), of each baseline checkout ("bundled@COMMIT"), and a real
    one where there is one ("real")."""
    procs, ports = [], {}
    for tree in (None, *baselines):
        port = _relay.free_port()
        # `python -m` puts its working directory first on sys.path: a baseline runs its own checkout's code
        p = subprocess.Popen([sys.executable, "-m", "chaos.proxy.toxiproxy", "--port", str(port)],
                             stdout=subprocess.DEVNULL, start_new_session=True,
                             cwd=None if tree is None else os.path.abspath(tree))
        procs.append(p)
        _wait(port, p)
        ports["bundled" if tree is None else "bundled@" + _relay.tree_name(tree)] = port
    url = os.environ.get("TOXIPROXY_URL")
    if url:
        u = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        ports["real"] = u.port or 8474
    elif shutil.which("toxiproxy-server"):
        port = _relay.free_port()
        p = subprocess.Popen([shutil.which("toxiproxy-server"), "-host", "127.0.0.1", "-port", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        _wait(port, p)
        ports["real"] = port
    return ports, procs


def make_proxy(api_port: int, name: str, upstream: int) -> int:
    try:
        api(api_port, "DELETE", f"/proxies/{name}")
    except OSError:
        pass
    p = api(api_port, "POST", "/proxies", {"name": name, "listen": "127.0.0.1:0",
                                          "upstream": f"127.0.0.1:{upstream}"})
    return int(p["listen"].rsplit(":", 1)[1])


# -- the run ------------------------------------------------------------------------------------------------


def overhead(direct: int, through: dict[str, int], rounds: int, quick: bool) -> dict[str, dict[str, float]]:
    n_ka, n_new, size = (100, 20, 16 << 20) if quick else (300, 50, 64 << 20)
    d: dict[str, dict[str, list[float]]] = {k: {} for k in through}
    for _ in range(rounds):
        base_ka = keepalive(direct, n_ka)
        base_new = fresh(direct, n_new)
        base_sse = [sse(direct) for _ in range(3)]
        base_dl = download(direct, size)
        for eng, port in through.items():
            r = d[eng]
            ka = keepalive(port, n_ka)
            r.setdefault("ka50", []).append(pct(ka, .5) - pct(base_ka, .5))
            r.setdefault("ka99", []).append(pct(ka, .99) - pct(base_ka, .99))
            r.setdefault("new50", []).append(pct(fresh(port, n_new), .5) - pct(base_new, .5))
            streams = [sse(port) for _ in range(3)]
            r.setdefault("sse_first", []).append(statistics.median(f for f, _ in streams)
                                                 - statistics.median(f for f, _ in base_sse))
            r.setdefault("gap99", []).append(pct([g for _, gs in streams for g in gs], .99)
                                             - pct([g for _, gs in base_sse for g in gs], .99))
            r.setdefault("dl", []).append(download(port, size) / base_dl)
    out = {}
    for eng, r in d.items():
        out[eng] = {k: statistics.median(v) for k, v in r.items()}
        out[eng]["sse_first99"] = pct(r["sse_first"], .99)
    return out


def accuracy(api_port: int, name: str, port: int, quick: bool) -> dict[str, str]:
    n = 20 if quick else 60
    res = {}
    base = statistics.median(keepalive(port, 30))
    for jitter in (0, 20):
        api(api_port, "POST", f"/proxies/{name}/toxics",
            {"name": "lat", "type": "latency", "attributes": {"latency": 100, "jitter": jitter}})
        xs = [x - base for x in keepalive(port, n)]
        api(api_port, "DELETE", f"/proxies/{name}/toxics/lat")
        res[f"latency 100 ± {jitter} ms: mean, sd"] = f"{statistics.mean(xs):.1f}, {statistics.pstdev(xs):.1f}"
    api(api_port, "POST", f"/proxies/{name}/toxics", {"name": "bw", "type": "bandwidth", "attributes": {"rate": 1000}})
    rate = download(port, 1_000_000 if quick else 3_000_000)
    api(api_port, "DELETE", f"/proxies/{name}/toxics/bw")
    res["bandwidth 1000 KB/s: B/s"] = f"{rate:,.0f}"
    # A delay must not become a bandwidth cap: the real server pipelines delayed chunks (421 MB/s measured here
    # through latency 100 for 16 MB, after the first byte).
    size = 16 << 20
    plain = statistics.median(download_after_first(port, size) for _ in range(3))
    api(api_port, "POST", f"/proxies/{name}/toxics", {"name": "lat", "type": "latency", "attributes": {"latency": 100}})
    delayed = statistics.median(download_after_first(port, size) for _ in range(3))
    api(api_port, "DELETE", f"/proxies/{name}/toxics/lat")
    res["16 MB after the first byte, MB/s: no toxic, latency 100 (ratio)"] = \
        f"{plain / 1e6:.0f}, {delayed / 1e6:.0f} ({delayed / plain:.2f})"
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds, 16 MB downloads (~15 s)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--baseline", metavar="TREE", action="append", default=[],
                    help="also run the bundled server of another checkout (say `git worktree add /tmp/base HEAD~1`), "
                         "as a column bundled@COMMIT in the same rounds; may be repeated")
    ap.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for tree in args.baseline:
        if not os.path.isdir(os.path.join(tree, "chaos", "proxy", "toxiproxy")):
            ap.error(f"--baseline {tree}: not a checkout of llm-chaos with the bundled Toxiproxy server")
    if args.serve_upstream:
        asyncio.run(_serve_upstream())
        return 0
    rounds = 3 if args.quick else max(args.rounds, 10)
    up = subprocess.Popen([sys.executable, __file__, "--serve-upstream"], stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
    procs = [up]
    try:
        upstream = int(up.stdout.readline())
        ports, started = start_engines(args.baseline)
        procs += started
        through = {eng: make_proxy(p, "bench_l4", upstream) for eng, p in ports.items()}
        ov = overhead(upstream, through, rounds, args.quick)
        acc = {eng: accuracy(ports[eng], "bench_l4", through[eng], args.quick) for eng in ports}
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(10)
    engines = list(ports)
    print(f"\nL4 proxy overhead: median over {rounds} interleaved rounds of (proxy - direct)"
          + ("" if "real" in ports else "; no real toxiproxy-server (set TOXIPROXY_URL or put it on PATH)"))
    rows = [
        ["keep-alive small req/resp, added P50 (ms)", "<= +0.15", *[ov[e]["ka50"] for e in engines]],
        ["keep-alive small req/resp, added P99 (ms)", "<= +0.5", *[ov[e]["ka99"] for e in engines]],
        ["new connection + request, added P50 (ms)", "(real +0.7-0.9)", *[ov[e]["new50"] for e in engines]],
        ["SSE 64x5 ms, first chunk added P50 (ms)", "<= +0.5-0.7", *[ov[e]["sse_first"] for e in engines]],
        ["SSE 64x5 ms, first chunk added P99 (ms)", "", *[ov[e]["sse_first99"] for e in engines]],
        ["SSE 64x5 ms, gap P99 added (ms)", "(real +0.3-0.6)", *[ov[e]["gap99"] for e in engines]],
        [f"{'16' if args.quick else '64'} MB download, throughput / direct", ">= 0.2", *[ov[e]["dl"] for e in engines]],
    ]
    print_table(["measure", "aim", *engines], rows)
    print("\nToxic accuracy (requested vs measured, keep-alive requests, added over no toxic)")
    keys = list(acc[engines[0]])
    print_table(["toxic", *engines], [[k, *[acc[e][k] for e in engines]] for k in keys])
    return 0


if __name__ == "__main__":
    sys.exit(main())
