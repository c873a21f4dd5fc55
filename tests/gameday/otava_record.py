"""Records Apache Otava 0.8.0's change points on the seeded series of test_edivisive.py into otava-0.8.0.json, so
that the test holds chaos/gameday/edivisive.py to the library where the library is not installed (it pins numpy
2.2 and scipy < 1.17, and pulls cloud clients: not a dependency of this project). Otava's analysis modules need
only numpy and scipy, so a copy installed without its dependencies runs here:

    pip install --no-deps --target /tmp/otava apache-otava==0.8.0
    PYTHONPATH=.:/tmp/otava python tests/gameday/otava_record.py
"""

import json
import os

from otava.analysis import compute_change_points

from tests.gameday.test_edivisive import CASES, SETTINGS, seeded_series

HERE = os.path.dirname(os.path.abspath(__file__))


def otava(values: list[float], window: int, max_p: float) -> list[dict]:
    # a list, not an array: Otava's detector slices a window out of a list only (an array is taken whole)
    cps, _ = compute_change_points(list(values), window_len=window, max_pvalue=max_p, min_magnitude=0.0)
    return [{"index": int(c.index), "p": float(c.stats.pvalue)} for c in cps]


def main() -> None:
    out = []
    for case in range(CASES):
        values = seeded_series(case)
        for window, max_p in SETTINGS:
            out.append({"case": case, "window": window, "max_p": max_p, "change_points": otava(values, window, max_p)})
    with open(os.path.join(HERE, "otava-0.8.0.json"), "w") as f:
        json.dump({"library": "apache-otava 0.8.0", "function": "otava.analysis.compute_change_points",
                   "min_magnitude": 0.0, "results": out}, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
