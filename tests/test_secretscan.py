"""The secret scan the secrets tests rely on finds what it claims to: each encoding in a file, and a process's
arguments (a scan that cannot find anything would make those tests pass for nothing)."""

import base64
import json
import subprocess
import sys
import time
import urllib.parse

from .secretscan import ArgvWatch, encodings, files_leaking

SECRET = 'sk-test/0123+4567=89&ab"cd\\ef'


def test_every_encoding_is_found_inside_other_text(tmp_path):
    written = {"plain": SECRET, "url": urllib.parse.quote(SECRET, safe=""), "json": json.dumps({"k": SECRET}),
               **{f"b64-{n}": base64.b64encode(b"Bearer:"[:n] + SECRET.encode() + b"!").decode() for n in range(3)},
               "hex": SECRET.encode().hex()}
    for name, text in written.items():
        (tmp_path / f"{name}.log").write_text(f"before {text} after\n")
    (tmp_path / "clean.log").write_text("nothing here " + SECRET[:6])
    hits = files_leaking(tmp_path, SECRET)
    assert {h.split(" holds ")[0] for h in hits} == {f"{n}.log" for n in written}, hits
    assert all(len(v) >= 8 for v in encodings(SECRET).values())


def test_argv_watch_sees_a_process_that_carries_the_secret():
    coded = base64.b64encode(SECRET.encode()).decode()
    with ArgvWatch(SECRET, every=0.05) as w:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)", coded])
        deadline = time.monotonic() + 10
        while not w.leaks and time.monotonic() < deadline:
            time.sleep(0.05)
        p.kill()
        p.wait()
    assert w.leaks and "base64" in w.leaks[0] and str(p.pid) in w.leaks[0]
