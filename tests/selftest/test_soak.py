"""`chaos selftest soak`: the memory judgement on series whose answer is known, the experiment it runs, and the
short soak end to end (110 s of load, a fault every 6 s: two cycles of every family, every fault reverted, the
records flowing, every process sampled; two cycles are too few for the memory verdict)."""

import json
import random
import subprocess
import sys

import pytest

from chaos.experiment.model import load_experiment
from chaos.selftest.soak import CYCLE, GROWTH_MB, Series, _quiet_windows, experiment


def _series(name, rss, step=1.0) -> Series:
    s = Series(name, 1)
    for i, y in enumerate(rss):
        s.t.append(i * step)
        s.rss_mb.append(y)
    return s


def test_a_leak_grows_and_a_sawtooth_a_warm_up_or_a_swing_does_not():
    rng = random.Random(1)
    burst = _series("gw", [50 + (30 if i % 48 < 10 else 0) + rng.random() for i in range(400)])
    leak = _series("r0", [50 + i * 0.1 + rng.random() for i in range(400)])  # 360 MB/h
    warm = _series("runner", [250 + min(i, 90) * 0.5 + rng.random() for i in range(400)])  # grows 2 cycles, then flat
    swing = _series("r0 child", [100 + (40 if (i // 48) % 2 else -40) + rng.random() for i in range(400)])
    b, lk, w, sw = (s.verdict(48) for s in (burst, leak, warm, swing))
    assert len(b["peaks_mb"]) == 8 and b["slope_mb_h"] is not None
    assert not b["grows"] and b["interval"][0] < 0 < b["interval"][1], b
    assert lk["grows"] and lk["growth_mb"] > GROWTH_MB and lk["interval"][0] > 300, lk
    assert not w["grows"] and not sw["grows"], (w, sw)
    short = _series("gw", [50 + i for i in range(250)]).verdict(48)  # five cycles: too few to judge
    assert short["slope_mb_h"] is None and not short["grows"] and len(short["peaks_mb"]) == 5


def test_the_experiment_cycles_through_every_family_and_loads(tmp_path):
    text = experiment(150, 6)
    p = tmp_path / "soak.yaml"
    p.write_text(text)
    exp = load_experiment(str(p))
    types = [f.type for f in exp.faults]
    assert len(types) >= 2 * len(CYCLE) and set(types) == {c.split(",")[0].split(": ")[1] for c in CYCLE}
    assert types[:len(CYCLE)] == types[len(CYCLE):2 * len(CYCLE)]  # the same order each cycle
    assert max(f.at for f in exp.faults) <= 150 - 5


def test_a_window_without_records_is_named(tmp_path):
    t0 = 1000.0
    with open(tmp_path / "requests.jsonl", "w") as f:
        for t in [0.5, 1, 3, 11, 12, 16]:  # nothing between 5 and 10 s
            f.write(json.dumps({"t_start": t0 + t}) + "\n")
    assert _quiet_windows(str(tmp_path), {"load_started": t0}) == ([5.0], 3)


@pytest.mark.slow
@pytest.mark.beside  # judges memory and records, not time
def test_the_short_soak_reverts_every_fault_keeps_records_flowing_and_no_process_grows(tmp_path):
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "soak", "--duration", "110s", "--period", "6s",
                        "--out", str(tmp_path / "run"), "--json", str(out)], capture_output=True, text=True,
                       timeout=600)
    doc = json.loads(out.read_text()) if out.exists() else {}
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert len(doc["families"]) == len(CYCLE) and doc["reverted"] == doc["faults"] >= 2 * len(CYCLE)
    assert doc["quiet_windows"] == 0 and doc["windows"] >= 20 and doc["problems"] == []
    # every long-lived process of the run was sampled all along, its peak per cycle stated (two cycles: too
    # few for the memory verdict, which the long mode gives)
    sampled = {m["name"] for m in doc["memory"] if m["samples"] >= 80 and len(m["peaks_mb"]) == 2}
    assert {"runner", "locust", "r0", "gw", "toxiproxy"} <= sampled, doc["memory"]
    assert any(n.startswith("llm-proxy") for n in sampled), sampled
    assert "problems: none" in r.stdout and "(not judged: under 6 cycles)" in r.stdout


def test_the_sampler_names_processes_from_the_journal_read_once_a_line(tmp_path):
    from chaos.selftest.soak import Sampler

    journal = tmp_path / "journal.jsonl"
    s = Sampler(str(tmp_path))
    assert s.names() == {}
    journal.write_text(json.dumps({"event": "run_started", "pid": 1}) + '\n{"event": "process_st')  # mid-write
    assert s.names() == {1: "runner"}
    with open(journal, "a") as f:
        f.write('arted", "instance": {"pid": 2, "id": "r0"}}\n' + json.dumps({"event": "load_started",
                                                                            "processes": [{"pid": 3}]}) + "\n")
    assert s.names() == {1: "runner", 2: "r0", 3: "locust"}
