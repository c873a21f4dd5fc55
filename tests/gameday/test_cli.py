"""chaos gameday's command line: the cron schedule (croniter), the exit code of a game day, bad input, and a
SIGINT that reaches a game day started in the background."""

import os
import signal
import subprocess
import sys

from chaos.gameday.cli import check_cron, exit_code, next_fire


def test_cron_expressions_are_parsed_by_croniter_and_a_bad_one_says_how_to_write_it():
    assert check_cron("0 3 * * 1") is None
    assert "five fields" in check_cron("61 3 * * 1")
    assert next_fire("0 3 * * 1", 0) == 4 * 86400 + 3 * 3600  # 1970-01-01 was a Thursday: Monday the 5th, 03:00


def test_exit_code_of_a_game_day():
    def doc(codes, status="finished", not_run=()):
        return {"runs": [{"exit_code": c} for c in codes], "status": status, "not_run": list(not_run)}

    assert exit_code(doc([0, 0])) == 0
    assert exit_code(doc([0, 4])) == 4
    assert exit_code(doc([0, 1])) == 1
    assert exit_code(doc([3, 0])) == 1
    assert exit_code(doc([0, 2])) == 2
    assert exit_code(doc([0], not_run=["b"])) == 1
    assert exit_code(doc([130], status="interrupted", not_run=["b"])) == 130


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    s = tmp_path / "s.yaml"
    s.write_text("name: s\nexperiments:\n  - {file: nope.yaml}\n")
    r = subprocess.run([sys.executable, "-m", "chaos", "gameday", str(s), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{s}:3:" in r.stderr and not (tmp_path / "o").exists()
    r = subprocess.run([sys.executable, "-m", "chaos", "gameday", "gamedays/nightly.yaml", "--every", "every monday"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a cron expression" in r.stderr


def test_a_game_day_started_with_sigint_ignored_still_stops_on_sigint(tmp_path):
    # `chaos gameday ... &` from a script inherits SIGINT ignored; a `kill -INT` sent on purpose must still stop it
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.Popen([sys.executable, "-m", "chaos", "gameday", "gamedays/nightly.yaml", "--every", "0 3 1 1 *",
                          "--out", str(tmp_path / "o")], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        line = p.stdout.readline()  # the state the signal needs: waiting for its next game day
        assert line.startswith("next game day at"), line
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 130 and "interrupted" in rest
