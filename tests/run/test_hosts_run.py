"""Whole runs on hosts (network namespaces the run makes; root only, skipped with the reason elsewhere): the
reference target laid out on three hosts, kernel faults on a host's link verified on the wire, and nothing left
behind (no namespace, veth, bridge, nftables table or qdisc) after a run, a Ctrl-C, or a SIGKILL and recover."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from chaos import netns as N

from .conftest import leftovers, report, start_run, wait_journal, wait_until
from .test_runs import chaos_run, skip_if_not_judged

pytestmark = [pytest.mark.slow, pytest.mark.skipif(N.why_not() is not None,
                                                   reason=f"cannot make hosts here: {N.why_not()}")]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every kernel fault at once, overlapping, on the three hosts: what an interruption must undo.
EVERY_FAULT = f"""name: every-kernel-fault
target: {ROOT}/targets/hosts.yaml
load: {{workload: chat, users: 4, duration: 30s, input_tokens: 30-60, output_tokens: 8-16,
        timeouts: {{connect: 2s, first_token: 10s, total: 20s}}}}
faults:
  - {{type: packet_loss, name: loss, at: 3s, host: node-a, rate: 5%}}
  - {{type: link_rate, name: rate, at: 3.2s, host: node-b, rate: 500}}
  - {{type: tcp_reset, name: resets, at: 3.4s, host: node-b, peer: edge, rate: 1%}}
  - {{type: partition, name: cut, at: 3.6s, host: node-a, peer: node-b}}
"""


def layout_of(run_dir) -> dict:
    with open(os.path.join(run_dir, "journal.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "hosts_creating":
                return e["layout"]
    raise AssertionError("no hosts_creating in the journal")


@pytest.fixture
def recovered():
    """Run dirs a test killed: recovered at its end whatever it asserted, so a failed test leaves no host behind."""
    dirs = []
    yield dirs
    for d in dirs:
        subprocess.run([sys.executable, "-m", "chaos", "recover", str(d)], capture_output=True, timeout=120)


def kernel_leftovers(layout: dict) -> list[str]:
    out = N.leftovers(layout["tag"])
    out += [f"namespace {h['netns']} holds nftables {t}" for h in layout["hosts"] if h["netns"] in N.namespaces()
            for t in N.sh(N.in_ns(h["netns"], ["nft", "list", "tables"]), check=False).stdout.split()]
    return out


@pytest.fixture(scope="module")
def loss_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hosts") / "run"
    r = chaos_run(os.path.join(ROOT, "experiments", "packet-loss.yaml"), run_dir, "--var", "PRESET=tiny",
                  "--var", "LOAD_FOR=16s", "--var", "FAULT_AT=4s", "--var", "FAULT_FOR=8s", "--var", "RATE=10%")
    return r, run_dir


def test_a_run_on_hosts_passes_with_the_loss_seen_on_the_wire(loss_run):
    r, run_dir = loss_run
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rep = report(run_dir)
    layout = layout_of(run_dir)
    # every process ran on its host, at its host's address
    started = [json.loads(x) for x in open(os.path.join(run_dir, "journal.jsonl")) if '"target_started"' in x][0]
    addr = {h["name"]: h["address"] for h in layout["hosts"]}
    where = {i["id"]: i for i in started["instances"]}
    assert {k: v["host"] for k, v in where.items()} == {"gw": "edge", "r0": "node-a", "r1": "node-b"}
    assert all(f"//{addr[v['host']]}:" in v["url"] for v in where.values())
    reverted = [json.loads(x) for x in open(os.path.join(run_dir, "journal.jsonl")) if '"fault_reverted"' in x][0]
    e = reverted["evidence"]
    assert e["packets"] > 500 and 0.05 < e["taken"] / e["packets"] < 0.15, e  # 10 %, both ways, on its counters
    assert sum(t["RetransSegs"] for t in e["tcp"].values()) > 0, e["tcp"]  # TCP sent again, for real
    assert any(n.startswith("loss-node-b: on the wire: dropped") for n in rep["notes"]), rep["notes"]
    assert kernel_leftovers(layout) == []
    assert any(json.loads(x)["event"] == "hosts_removed" for x in open(os.path.join(run_dir, "journal.jsonl")))


def every_fault_on(tmp_path, recovered):
    """A run of EVERY_FAULT, returned once its four faults are applied (and recovered at the test's end)."""
    exp = tmp_path / "every.yaml"
    exp.write_text(EVERY_FAULT)
    run_dir = tmp_path / "run"
    proc = start_run(str(exp), run_dir, "--var", "PRESET=tiny")
    recovered.append(run_dir)
    assert wait_journal(run_dir, "fault_applied", 4, timeout=120), proc.stdout.read() if proc.poll() else "timeout"
    return proc, run_dir


def test_ctrl_c_with_every_kernel_fault_on_leaves_nothing(tmp_path, recovered):
    proc, run_dir = every_fault_on(tmp_path, recovered)
    layout = layout_of(run_dir)
    assert kernel_leftovers(layout)  # applied: there is something to undo
    proc.send_signal(signal.SIGINT)
    assert proc.wait(90) == 130
    assert wait_until(lambda: leftovers(run_dir) == [], timeout=30), leftovers(run_dir)
    assert kernel_leftovers(layout) == []


def test_sigkill_with_every_kernel_fault_on_then_recover_leaves_nothing(tmp_path, recovered):
    proc, run_dir = every_fault_on(tmp_path, recovered)
    time.sleep(0.2)
    proc.kill()
    proc.wait(10)
    layout = layout_of(run_dir)
    ns = next(h["netns"] for h in layout["hosts"] if h["name"] == "node-b")
    assert "tbf" in N.sh(N.in_ns(ns, ["tc", "qdisc", "show"])).stdout  # the shaper, left by the kill
    r = subprocess.run([sys.executable, "-m", "chaos", "recover", str(run_dir)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "removed nftables table" in r.stdout and "removed tbf" in r.stdout, r.stdout
    assert f"namespace {ns}" in r.stdout and f"bridge {layout['bridge']}" in r.stdout, r.stdout
    assert wait_until(lambda: leftovers(run_dir) == [], timeout=30), leftovers(run_dir)
    assert kernel_leftovers(layout) == []
    assert report(run_dir)["verdict"] == "interrupted"


def test_hosts_refuse_a_proxy_between_hosts_naming_the_line(tmp_path):
    exp = tmp_path / "bad.yaml"
    exp.write_text(EVERY_FAULT.replace("faults:\n", "faults:\n  - {type: latency, at: 1s, link: r1, latency: 50ms}\n"))
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", str(exp)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 2 and f"{exp}:6:" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "packet_loss" in r.stdout + r.stderr


FLEET = f"""name: fleet
target: {ROOT}/targets/hosts-fleet.yaml
load: {{workload: chat, users: 6, duration: 20s, input_tokens: 30-60, output_tokens: 8-16, workers: 2,
        timeouts: {{connect: 2s, first_token: 10s, total: 20s}}}}
faults:
  - {{type: partition, name: cut-w1, at: 8s, host: load-c}}
"""


def test_a_fleet_on_hosts_puts_every_record_on_the_masters_clock_and_names_the_worker_it_lost(tmp_path):
    """The master and two workers on hosts of their own, each worker's clock set 2.5 s off (as another machine's
    may be): the exchanges at start find it, every record lands on the master's timeline; then w1's host is cut
    off: the load goes on with w0, and the run says which worker's requests are missing from when."""
    exp = tmp_path / "fleet.yaml"
    exp.write_text(FLEET)
    run_dir = tmp_path / "run"
    r = chaos_run(exp, run_dir, "--var", "PRESET=tiny", env={**os.environ, "CHAOS_CLOCK_SKEW_S": "2.5"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    offsets = json.loads((run_dir / "clock-offsets.json").read_text())
    assert set(offsets) == {"w0", "w1"}
    for w, o in offsets.items():
        assert abs(o["offset"] + 2.5) <= o["bound"] + 0.005 and o["exchanges"] == 5, (w, o)
    events = [json.loads(x) for x in open(run_dir / "journal.jsonl")]
    t0 = next(e["t"] for e in events if e["event"] == "load_started")
    records = [json.loads(x) for x in open(run_dir / "requests.jsonl")]
    by = {w: [x for x in records if x["worker"] == w] for w in ("w0", "w1")}
    assert len(by["w0"]) > 100 and len(by["w1"]) > 10
    starts = [x["t_start"] for x in records]
    assert t0 - 1.0 <= min(starts) and max(starts) <= t0 + 25, (t0, min(starts), max(starts))  # not 2.5 s off
    cut = next(e["t"] for e in events if e["event"] == "fault_applied")
    assert max(x["t_end"] or x["t_start"] for x in by["w1"]) < cut + 1.0  # w1's stop when its host is cut off
    notes = report(run_dir)["notes"]
    assert any(re.match(r"worker clocks set onto the master's: w0 -2[45][0-9]{2}\.[0-9]{2} ms \(± ", n)
               for n in notes), notes
    assert any(n.startswith("Locust worker w1 (host load-c) sent no record after") for n in notes), notes
    started = next(e for e in events if e["event"] == "load_started")
    assert len(started["processes"]) == 3  # the master and its two workers, each journaled
    assert kernel_leftovers(layout_of(run_dir)) == []


def test_targets_up_and_down_on_hosts_leaves_nothing(tmp_path):
    """`chaos targets up` keeps a target on hosts running after it exits; `chaos targets down` stops it and
    removes its namespaces, veths and bridge (its state file holds the layout)."""
    def chaos(*args):
        return subprocess.run([sys.executable, "-m", "chaos", "targets", *args, f"{ROOT}/targets/hosts.yaml", "--var",
                               "PRESET=tiny"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": ROOT})
    up = chaos("up")
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((tmp_path / ".chaos" / "targets" / "reference-on-hosts.json").read_text())
    tag = state["hosts"]["tag"]
    try:
        assert len(N.leftovers(tag)) == 7  # three namespaces, three veths, the bridge
        assert "gw: http://10.213." in up.stdout
    finally:
        down = chaos("down")
    assert down.returncode == 0 and f"removed bridge lc-{tag}-br" in down.stdout, down.stdout + down.stderr
    assert N.leftovers(tag) == []
