"""A seeded run's report.json keeps its keys, structure and figures: the synthetic run (tests/report/synthetic.py:
three load steps, a fault window with errors of several classes, phases, recovery, stability, server metrics)
reported again by `chaos report` must give golden/report.json, which the code before the restructuring of issue
43 wrote (main at 0e51365, the first test below run on that tree). A refactoring that changes a key, a
type, a list's length or a figure fails here; figures are compared to 1e-9 relative, so a numpy release that
rounds the last bit differently does not."""

from __future__ import annotations

import json
import math
import pathlib

from chaos.report.rerender import rerender
from tests.report.synthetic import write_run

GOLDEN = pathlib.Path(__file__).parent / "golden" / "report.json"


def differences(want, got, path: str = "$") -> list[str]:
    """Every place got differs from want: a key, a type, a length, a string or a number beyond 1e-9 relative."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}: key {k!r} {'missing' if k in want else 'added'}" for k in sorted(set(want) ^ set(got))]
        for k in sorted(set(want) & set(got)):
            out += differences(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(got)} items, golden has {len(want)}"]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in differences(w, g, f"{path}[{i}]")]
    number = (int, float)
    if isinstance(want, number) and isinstance(got, number) and not isinstance(want, bool) \
            and not isinstance(got, bool):
        return [] if math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {got!r}, golden {want!r}"]
    return [] if want == got and type(want) is type(got) else [f"{path}: {got!r}, golden {want!r}"]


def test_the_seeded_runs_report_is_the_golden_one(tmp_path):
    run = tmp_path / "golden-run"  # the experiment's name comes from the folder's
    run.mkdir()
    write_run(str(run))
    rerender(str(run))
    got = json.loads((run / "report.json").read_text())
    want = json.loads(GOLDEN.read_text())
    assert len(want) > 20 and want["steps"] and want["phases"] and want["recovery"]  # every section is there
    assert differences(want, got) == []


def test_the_comparison_sees_each_kind_of_change():
    want = {"a": 1.0, "b": [1, 2], "c": {"d": "x"}, "e": True}
    assert differences(want, {"a": 1.0 + 1e-12, "b": [1, 2], "c": {"d": "x"}, "e": True}) == []
    found = differences(want, {"a": 1.1, "b": [1], "c": {"d": "y", "z": 0}, "e": 1})
    assert found == ["$.a: 1.1, golden 1.0", "$.b: 1 items, golden has 2", "$.c: key 'z' added",
                     "$.c.d: 'y', golden 'x'", "$.e: 1, golden True"]
