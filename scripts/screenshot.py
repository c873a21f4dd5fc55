"""The README's picture of the HTML report, taken in headless Chromium so that it shows the report as it is today.

    python scripts/screenshot.py                      # runs experiments/kill-instance.yaml first (about a minute)
    python scripts/screenshot.py reports/kill-instance-20261205T120000Z   # or shoots a run you have
    python scripts/screenshot.py RUN_DIR --out /tmp/report.png --height 1400

Needs Chromium (apt-get install chromium). The page is shot once every figure is drawn (the page's own count of
its plots, as tests/report/test_html.py waits for it), top of the page, 1,280 px wide.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# the repo's own browser driver, and the same "every figure drawn" test the suite waits for
from tests.report.cdp import READY, CDPError, find_chromium, inspect_page  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("run_dir", nargs="?", help="a run directory with report.html (default: run kill-instance now)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "report.png"))
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1600)
    a = p.parse_args(argv)
    if find_chromium() is None:
        print("error: no Chromium found: apt-get install chromium", file=sys.stderr)
        return 2
    run_dir = a.run_dir
    if run_dir is None:
        run_dir = os.path.join(tempfile.mkdtemp(prefix="chaos-screenshot-"), "run")
        print(f"running experiments/kill-instance.yaml into {run_dir} ...", flush=True)
        r = subprocess.run([sys.executable, "-m", "chaos", "run", os.path.join(ROOT, "experiments",
                                                                               "kill-instance.yaml"),
                            "--out", run_dir], cwd=ROOT)
        if r.returncode not in (0, 1, 4):
            print(f"error: the run ended with exit {r.returncode}; no report to shoot", file=sys.stderr)
            return 2
    page = os.path.join(run_dir, "report.html")
    if not os.path.exists(page):
        print(f"error: {page} does not exist: give a run directory (chaos run ... --out DIR)", file=sys.stderr)
        return 2
    try:
        got = inspect_page(os.path.abspath(page), READY, os.path.abspath(a.out), timeout=90, width=a.width,
                           height=a.height, full_page=False)
    except CDPError as e:
        print(f"error: chromium: {e}", file=sys.stderr)
        return 2
    if got.errors:
        print("error: the page logged errors: " + "; ".join(got.errors), file=sys.stderr)
        return 1
    print(f"wrote {os.path.relpath(a.out)} ({os.path.getsize(a.out):,} bytes) from {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
