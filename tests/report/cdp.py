"""Open a local HTML file in headless Chromium and watch it over the Chrome DevTools Protocol: console errors,
exceptions, every request the page makes, the result of a script; a screenshot.

Small on purpose, and usable outside the tests (a README screenshot script can call inspect_page): Chromium is
started in its own process group and killed as a group whatever happens, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import aiohttp

# the figures drawn, each a .js-plotly-plot with its SVG: the page's own count (meta chaos-figures) must match
READY = """(() => {
  const want = +document.querySelector('meta[name="chaos-figures"]').content;
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const drawn = plots.filter(p => p.querySelector('.main-svg')).length;
  return plots.length === want && drawn === want ? {want, plots: plots.length, drawn} : null;
})()"""


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


class CDPError(Exception):
    """Chromium did not start, or the page did not answer in time; the message says which step."""


@dataclass(slots=True)
class PageReport:
    url: str
    errors: list[str] = field(default_factory=list)  # exceptions, console.error, error-level log entries
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, the page itself included
    value: object = None  # what the ready script returned, once truthy
    screenshot: str | None = None  # path of the PNG written

    def network_requests(self) -> list[str]:
        """Requests that are not the page itself and not in-memory (data:, blob:)."""
        return [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:"))]


class _Session:
    """One page target's websocket: commands by id, events into a list."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self.events: list[dict] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            d = json.loads(msg.data)
            fut = self.pending.pop(d.get("id"), None) if "id" in d else None
            if fut is not None and not fut.done():
                fut.set_result(d)
            elif "method" in d:
                self.events.append(d)

    async def send(self, method: str, timeout: float = 20, **params) -> dict:
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_json({"id": i, "method": method, "params": params})
        try:
            d = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise CDPError(f"{method}: no answer from Chromium in {timeout:g}s") from None
        if "error" in d:
            raise CDPError(f"{method}: {d['error']}")
        return d.get("result", {})

    async def wait_event(self, method: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events:
                if e["method"] == method:
                    return e
            await asyncio.sleep(0.05)
        raise CDPError(f"no {method} within {timeout:g}s")


def _start(binary: str, profile: str, width: int, height: int) -> subprocess.Popen:
    args = [binary, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
            "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", f"--window-size={width},{height}",
            "about:blank"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root (CI containers)
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


async def _port(proc: subprocess.Popen, profile: str, timeout: float) -> int:
    path = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CDPError(f"chromium exited with {proc.returncode} before it listened")
        try:
            with open(path) as f:
                first = f.readline().strip()
            if first:
                return int(first)
        except (FileNotFoundError, ValueError):
            pass
        await asyncio.sleep(0.1)
    raise CDPError(f"chromium wrote no DevToolsActivePort in {timeout:g}s")


async def _inspect(binary: str, path: str, ready_js: str | None, screenshot: str | None, timeout: float,
                   width: int, height: int, full_page: bool) -> PageReport:
    url = "file://" + os.path.abspath(path)
    report = PageReport(url)
    with tempfile.TemporaryDirectory(prefix="chaos-cdp-") as profile:
        proc = _start(binary, profile, width, height)
        try:
            port = await _port(proc, profile, min(timeout, 30))
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                    targets = await r.json(content_type=None)
                page = next((t for t in targets if t.get("type") == "page"), None)
                if page is None:
                    raise CDPError("chromium has no page target")
                async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    s = _Session(ws)
                    for domain in ("Runtime", "Log", "Network", "Page"):
                        await s.send(f"{domain}.enable")
                    # The page's viewport is width x height exactly: --window-size counts the window's own frame,
                    # which left a 1280 x 1600 shot 1457 px tall.
                    await s.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                 deviceScaleFactor=1, mobile=False)
                    await s.send("Page.navigate", url=url)
                    await s.wait_event("Page.loadEventFired", timeout)
                    if ready_js:
                        report.value = await _until(s, ready_js, timeout)
                    if screenshot:
                        await _screenshot(s, screenshot, full_page)
                        report.screenshot = screenshot
                    _collect(s.events, report)
                    s.reader.cancel()
        finally:
            _kill(proc)
    return report


async def _until(s: _Session, js: str, timeout: float):
    """js's value once truthy (polled); the last value when time runs out."""
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        r = await s.send("Runtime.evaluate", expression=js, returnByValue=True)
        value = (r.get("result") or {}).get("value")
        if value:
            return value
        await asyncio.sleep(0.2)
    return value


async def _screenshot(s: _Session, path: str, full_page: bool) -> None:
    params = {"format": "png"}
    if full_page:
        m = await s.send("Page.getLayoutMetrics")
        size = m.get("cssContentSize") or m["contentSize"]
        params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                        "height": min(size["height"], 16000), "scale": 1})
    r = await s.send("Page.captureScreenshot", timeout=60, **params)
    with open(path, "wb") as f:
        f.write(base64.b64decode(r["data"]))


def _collect(events: list[dict], report: PageReport) -> None:
    for e in events:
        m, p = e["method"], e.get("params") or {}
        if m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            report.errors.append("exception: " + ((d.get("exception") or {}).get("description") or d.get("text", "")))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            report.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                              for a in p.get("args") or []))
        elif m == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
            entry = p["entry"]
            report.errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
        elif m == "Network.requestWillBeSent":
            report.requests.append((p.get("request") or {}).get("url", ""))


def _kill(proc: subprocess.Popen) -> None:
    """The whole Chromium group (its renderer, GPU and utility processes), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def inspect_page(path: str, ready_js: str | None = None, screenshot: str | None = None, timeout: float = 60,
                 width: int = 1400, height: int = 1000, full_page: bool = True,
                 binary: str | None = None) -> PageReport:
    """Load path in headless Chromium; wait for its load event, then (ready_js) until that expression is
    truthy; optionally save a PNG; return what the page logged and requested. Raises CDPError when Chromium is
    missing or does not answer."""
    binary = binary or find_chromium()
    if binary is None:
        raise CDPError("no Chromium found (apt-get install chromium)")
    return asyncio.run(asyncio.wait_for(
        _inspect(binary, path, ready_js, screenshot, timeout, width, height, full_page), timeout + 60))
