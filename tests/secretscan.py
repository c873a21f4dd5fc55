"""Where a secret could leak from a run: every file it wrote and every process's arguments, searched for the
secret and its common encodings (base64 at each of its three alignments inside a longer text, URL-encoded,
JSON-escaped, hex). A key that only shows up base64'd in a log is as leaked as a plain one."""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import urllib.parse

import psutil


def encodings(secret: str) -> dict[str, bytes]:
    raw = secret.encode()
    out = {"plain": raw, "url-encoded": urllib.parse.quote(secret, safe="").encode(),
           "url-encoded (form)": urllib.parse.quote_plus(secret).encode(),
           "JSON-escaped": json.dumps(secret)[1:-1].encode(), "hex": binascii.hexlify(raw)}
    for shift in range(3):  # the secret after 0, 1 or 2 other bytes: only the characters it alone decides
        coded = base64.b64encode(b"\0" * shift + raw)
        start = (shift * 4 + 2) // 3
        end = len(coded) - (0, 3, 2)[(shift + len(raw)) % 3]  # drop what the bytes after it (or padding) decide
        core = coded[start:end]
        if len(core) < 8:  # too short to mean anything (and the empty string is in every file)
            continue
        out[f"base64 (+{shift})"] = core
        out[f"base64url (+{shift})"] = core.replace(b"+", b"-").replace(b"/", b"_")
    return out


def files_leaking(root, *secrets: str) -> list[str]:
    """'FILE holds SECRET[:4]... (ENCODING)' for each hit under root."""
    wanted = [(s, name, coded) for s in secrets for name, coded in encodings(s).items()]
    hits = []
    for folder, _, names in os.walk(root):
        for n in names:
            path = os.path.join(folder, n)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            hits += [f"{os.path.relpath(path, root)} holds {s[:4]}... ({name})" for s, name, coded in wanted
                     if coded in data]
    return hits


class ArgvWatch:
    """Polls every process's command line while a run goes on; `leaks` lists each one that held a secret in
    any encoding. A context manager: `with ArgvWatch(key) as w: run(...)`, then assert not w.leaks."""

    def __init__(self, *secrets: str, every: float = 0.1):
        self.coded = [(s, name, coded.decode(errors="replace")) for s in secrets
                      for name, coded in encodings(s).items()]
        self.every = every
        self.leaks: list[str] = []
        self.looked = 0  # polls made: a watcher that never looked proves nothing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["pid", "cmdline"]):
                line = " ".join(p.info.get("cmdline") or [])
                for s, name, coded in self.coded:
                    if coded in line:
                        self.leaks.append(f"pid {p.info['pid']} argv holds {s[:4]}... ({name}): {line[:80]}")
            self.looked += 1
            self._stop.wait(self.every)
