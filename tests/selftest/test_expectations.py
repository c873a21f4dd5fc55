"""An engine's own expectation table: recorded from what it answered, then used to judge it again. A 5xx stays a
finding every time; a changed answer is named with what it was."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from chaos.selftest.expectations import differs_from, read_table, summarize, write_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINES = os.environ.get("CHAOS_ENGINES") or os.path.join(ROOT, ".engines")


def test_a_changed_answer_says_what_it_was_and_a_new_case_is_named():
    rec = {"status": 400, "param": "temperature", "code": None}
    assert differs_from(rec, {"status": 400, "param": "temperature", "code": None}) is None
    assert differs_from(rec, {"status": 200, "param": None, "code": None}) == \
        "status 200, recorded 400; param None, recorded 'temperature'"
    assert differs_from(None, {"status": 200, "param": None, "code": None}).startswith("not in the table")


def test_the_table_round_trips_and_summarizes_by_family(tmp_path):
    rows = [{"case": "blns/1/chat", "status": 200, "param": None, "code": None, "verdict": "as-expected"},
            {"case": "invalid JSON", "status": 500, "param": None, "code": None, "verdict": "5xx"}]
    path = str(tmp_path / "t.json")
    write_table(path, rows, {"owned_by": "x"})
    doc = read_table(path)
    assert doc["cases"]["invalid JSON"]["verdict"] == "5xx" and doc["owned_by"] == "x"
    assert summarize(rows)["hostile"]["5xx"] == 1 and summarize(rows)["blns"]["as-expected"] == 1
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ValueError, match="not an expectation table"):
        read_table(str(tmp_path / "bad.json"))


def test_the_shipped_tables_hold_what_the_engines_answered():
    """Recorded here from llama.cpp's llama-server and vLLM (docs/engines.md): their 5xx are in them as findings."""
    for name, fives in (("llama-cpp", 37), ("vllm", 3)):
        doc = read_table(os.path.join(ROOT, "targets", "engines", "expectations", f"{name}.json"))
        assert len(doc["cases"]) == 559
        assert sum(f["5xx"] + f["no-answer"] for f in doc["summary"].values()) == fives, name


@pytest.mark.slow
@pytest.mark.beside  # judges answers, not time: in the engine tier's group, beside the timed whole runs
@pytest.mark.xdist_group("engines")
def test_llama_server_judged_against_its_own_table(tmp_path):
    server_bin = os.path.join(ENGINES, "llama-cpp", "bin", "llama-server")
    model = os.path.join(ENGINES, "models", "tiny.gguf")
    if not (os.path.exists(server_bin) and os.path.exists(model)):
        pytest.skip(f"llama.cpp is not built at {ENGINES}: scripts/engines.sh llama-cpp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server_bin, "-m", model, "--alias", "chaos", "-c", "1024", "-np", "4", "-kvu", "-t", "1",
                             "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        table = tmp_path / "llama.json"
        shutil.copy(os.path.join(ROOT, "targets", "engines", "expectations", "llama-cpp.json"), table)
        out = tmp_path / "r.json"
        r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "hostile", "--url", url, "--abnormal",
                            "--expect", str(table), "--json", str(out)], capture_output=True, text=True, timeout=600)
        result = json.loads(out.read_text())
        assert r.returncode == 1 and not result["clean"], r.stdout[-2000:]  # its 5xx are still findings
        assert result["total"]["errors_5xx"] == 37 and result["total"]["wrong"] == 0, result["findings"][:5]
        assert any("invalid JSON: 500" in f and "never an expectation" in f for f in result["findings"])
        # a table that says otherwise: the changed answer is named
        doc = json.loads(table.read_text())
        doc["cases"]["completions temperature=-0.1"]["status"] = 400
        table.write_text(json.dumps(doc))
        r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "hostile", "--url", url, "--abnormal",
                            "--expect", str(table), "--json", str(out)], capture_output=True, text=True, timeout=600)
        result = json.loads(out.read_text())
        assert result["total"]["wrong"] == 1
        assert any("completions temperature=-0.1: status 200, recorded 400" in f for f in result["findings"])
    finally:
        proc.terminate()
        proc.wait(10)
