"""`chaos export` on the command line: what it prints, its help, and bad input (a missing file, a bad flag, a
fault it cannot place) ending with exit 2 and the file named."""

import os

import pytest

from chaos.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILL = os.path.join(ROOT, "experiments", "kill-instance.yaml")


def run(capsys, *args):
    code = main(["export", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_it_prints_what_it_wrote_what_it_could_not_and_that_no_cluster_ran_it(capsys, tmp_path):
    out = str(tmp_path / "k")
    code, text, _ = run(capsys, KILL, "--to", "chaos-mesh", "--service", "vllm", "--namespace", "llm",
                        "--instance", "r1=vllm-1", "--out", out)
    assert code == 0
    assert f"wrote {out}/" in text and "chaos/workflow-kill-instance.yaml" in text
    assert "exported: kill_instance#0 (kill_instance at 15s) -> PodChaos pod-kill" in text
    assert "No Kubernetes cluster ran these resources" in text
    assert "pods:\n          llm:\n          - vllm-1" in open(os.path.join(out, "chaos",
                                                                      "workflow-kill-instance.yaml")).read()
    code, text, _ = run(capsys, os.path.join(ROOT, "experiments", "stream-stall.yaml"), "--to", "chaos-mesh",
                        "--out", str(tmp_path / "s"))
    assert code == 0 and "not exported: stall-r1 (stream_stall)" in text and "run it beside:" in text
    assert "chaos run " + str(tmp_path / "s") + "/beside.yaml" in text


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", "--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and "examples:" in text and "--instance r1=vllm-1" in text and "--schedule" in text


def test_a_missing_file_exits_2_naming_it(capsys, tmp_path):
    missing = str(tmp_path / "nope.yaml")
    code, _, err = run(capsys, missing, "--to", "chaos-mesh")
    assert code == 2 and "nope.yaml" in err and err.startswith("error:")


def test_an_invalid_experiment_exits_2_with_file_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntarget: {kind: reference}\nload: {users: 2, duration: 10s}\n"
                   "faults:\n  - {type: kill_instance, at: soon}\n")
    code, _, err = run(capsys, str(bad), "--to", "chaos-mesh")
    assert code == 2 and f"{bad}:5:" in err


@pytest.mark.parametrize("args, says", [
    (["--to", "chaos-mesh", "--selector", "app"], "--selector 'app'"),
    (["--to", "chaos-mesh", "--instance", "r1"], "--instance 'r1'"),
    (["--to", "chaos-mesh", "--namespace", "Prod_NS"], "--namespace 'Prod_NS'"),
    (["--to", "chaos-mesh", "--schedule", "every monday"], "--schedule"),
    (["--to", "chaos-mesh", "--workers", "0"], "--workers 0"),
])
def test_a_bad_flag_value_exits_2_saying_what_to_give(capsys, tmp_path, args, says):
    code, _, err = run(capsys, KILL, *args, "--out", str(tmp_path / "o"))
    assert code == 2 and says in err
    assert not (tmp_path / "o").exists()  # nothing written


def test_an_unknown_target_or_no_target_is_argparse_s_exit_2(capsys):
    for args in (["--to", "kubernetes"], []):
        with pytest.raises(SystemExit) as e:
            main(["export", KILL, *args])
        assert e.value.code == 2
    assert "--to" in capsys.readouterr().err


def test_a_fault_on_the_backup_without_instance_exits_2_naming_the_file_and_the_flag(capsys, tmp_path):
    path = os.path.join(ROOT, "experiments", "all-primaries-down.yaml")
    code, _, err = run(capsys, path, "--to", "chaos-mesh", "--out", str(tmp_path / "o"))
    assert code == 2 and "all-primaries-down.yaml" in err and "--instance b0=POD" in err
