"""Hostile experiment files: bounded parsing (aliases, depth, size), merge keys, and no echo of foreign files.

Every refusal is one line `file:line:col: ...` naming the limit, from `chaos validate` and `chaos run` alike,
never a traceback.
"""

import contextlib
import io
import os
import subprocess
import sys
import threading
import time

import pytest

from chaos.cli import build_parser
from chaos.experiment import loader as L
from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment

from .test_files import GOOD


def chaos(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=timeout)


PARSER = build_parser()


def command(*argv) -> tuple[int, str, str]:
    """A chaos command run in this process (its own parser and function): an exception would fail the test
    where the command line would print a traceback."""
    out, err = io.StringIO(), io.StringIO()
    args = PARSER.parse_args(list(argv))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def refused(path, *needles, subprocess_too=False):
    """`chaos validate` and `chaos run --dry-run` both refuse path with exit 2, each problem one line."""
    runs = [command("validate", str(path)), command("run", str(path), "--dry-run")]
    if subprocess_too:
        r = chaos("validate", str(path))
        runs.append((r.returncode, r.stdout, r.stderr))
    for code, out, err in runs:
        assert code == 2, (out[-500:], err[-1500:])
        assert "Traceback" not in err and all(line.startswith("error: ") for line in err.splitlines()), err
        for n in needles:
            assert n in err, (n, err[-1500:])
    return runs[0][2]


def billion_laughs(levels=9):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_quickly_naming_the_limit(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(billion_laughs())
    err = refused(p, f"{p}:", "expands to more than", subprocess_too=True)
    assert f"{L.MAX_NODES:,}" in err  # the limit is named


def test_self_referencing_alias_is_a_cycle_not_a_recursion_error(tmp_path):
    p = tmp_path / "self.yaml"
    p.write_text("name: t\nload: &a {users: [*a]}\n")
    refused(p, f"{p}:2:", "refers to a node that contains it", subprocess_too=True)


def test_deep_nesting_is_refused_at_the_line_where_it_passes_the_limit(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("name: t\nload: " + "[" * 10_000 + "]" * 10_000 + "\n")
    refused(p, f"{p}:2:", f"nested more than {L.MAX_DEPTH} deep", subprocess_too=True)
    q = tmp_path / "deep-block.yaml"
    q.write_text("name: t\n" + "".join(" " * i + f"k{i}:\n" for i in range(200)))
    refused(q, f"{q}:", f"nested more than {L.MAX_DEPTH} deep")


def test_many_aliases_are_refused(tmp_path):
    p = tmp_path / "aliases.yaml"
    p.write_text("name: t\nx: &x 1\nload: [" + ", ".join(["*x"] * (L.MAX_ALIASES + 1)) + "]\n")
    refused(p, f"{p}:3:", f"more than {L.MAX_ALIASES} aliases")


def test_700k_keys_are_refused_in_well_under_a_few_seconds(tmp_path):
    p = tmp_path / "keys.yaml"
    p.write_text("".join(f"k{i}: {i}\n" for i in range(700_000)))
    t0 = time.monotonic()
    with pytest.raises(ExperimentError) as e:
        L.read_file(str(p))
    took = time.monotonic() - t0
    (msg,) = e.value.problems
    assert msg.startswith(f"{p}:") and "KiB" in msg and str(L.MAX_BYTES // 1024) in msg, msg
    assert took < 3.0, f"refusing took {took:.1f}s"  # it reads at most MAX_BYTES + 1 bytes, parses nothing
    refused(p, "limit", subprocess_too=True)


def test_many_small_nodes_under_the_byte_limit_are_refused_by_count(tmp_path):
    p = tmp_path / "nodes.yaml"
    p.write_text("name: t\nload: [" + ",".join("1" for _ in range(L.MAX_NODES + 10)) + "]\n")
    assert p.stat().st_size < L.MAX_BYTES
    t0 = time.monotonic()
    with pytest.raises(ExperimentError) as e:
        L.read_file(str(p))
    assert time.monotonic() - t0 < 5.0
    (msg,) = e.value.problems
    assert msg.startswith(f"{p}:2:") and f"more than {L.MAX_NODES:,} values" in msg, msg


def test_unbuildable_scalars_are_refused_with_a_line(tmp_path):
    p = tmp_path / "long.yaml"
    p.write_text("name: t\nload: {users: " + "1" * 5000 + "}\n")  # Python's int() refuses > 4300 digits
    refused(p, f"{p}:2:", "a number too long to read")
    q = tmp_path / "tag.yaml"
    q.write_text("name: t\nload: {seed: !!python/object/apply:os.system [ls]}\n")
    refused(q, f"{q}:2:", "YAML tags other than the core ones")


def test_a_device_or_fifo_is_not_read(tmp_path):
    with pytest.raises(ExperimentError) as e:
        L.read_file("/dev/zero")  # endless: reading it would not stop at a limit that counts lines
    assert "not a regular file" in e.value.problems[0]
    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)  # opening it to read blocks until a writer comes: the refusal must come first
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(str(fifo))), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # blocked in open(): let it go (a writer that closes at once gives EOF)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert outcome and "not a regular file" in outcome[0], outcome
    for args in (["validate", str(fifo)], ["run", str(fifo), "--dry-run"]):
        r = chaos(*args, timeout=60)  # a hang is a TimeoutExpired, not a stuck test
        assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def _refusal(path) -> str:
    try:
        L.read_file(path)
    except ExperimentError as e:
        return e.problems[0]
    return "read"


def test_merge_keys_are_supported_with_positions_inside_merged_mappings(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text(GOOD + "  - <<: &slow {type: server_hook, instance: 0, step_delay_ms: 20, duration: 2s}\n"
                        "    at: 4s\n"
                        "  - {<<: *slow, at: 5s, instance: 1}\n"
                        "  - <<: [*slow, {hang_s: 1}]\n"
                        "    at: 6s\n")
    exp = load_experiment(str(p))
    hooks = exp.faults[1:]
    assert [f.at for f in hooks] == [4.0, 5.0, 6.0]
    assert hooks[0].params.to_dict() == {"instance": 0, "step_delay_ms": 20, "duration": 2.0}
    assert hooks[1].params.instance == 1 and hooks[1].params.step_delay_ms == 20  # explicit key wins
    assert hooks[2].params.hang_s == 1 and hooks[2].params.step_delay_ms == 20  # a list of mappings
    # An error inside a merged mapping points at the line where the value is written (the anchor).
    bad = tmp_path / "merge-bad.yaml"
    bad.write_text(GOOD + "  - <<: &slow {type: server_hook, instance: 0, step_delay_ms: -5, duration: 2s}\n"
                          "    at: 4s\n"
                          "  - {<<: *slow, at: 5s}\n")
    err = refused(bad, f"{bad}:6:")
    assert "faults[1].step_delay_ms" in err and "faults[2].step_delay_ms" in err and f"{bad}:6:" in err
    # extension keys (x-...) hold anchors for merging and are otherwise ignored
    ext = tmp_path / "ext.yaml"
    ext.write_text("x-kill: &kill {type: kill_instance, instance: 1, restart_after: 2s}\n" +
                   GOOD.split("faults:")[0] + "faults:\n  - {<<: *kill, at: 3s}\n")
    assert load_experiment(str(ext)).faults[0].params.restart_after == 2.0


def test_merge_of_a_scalar_is_refused_with_a_line(tmp_path):
    p = tmp_path / "merge-scalar.yaml"
    p.write_text(GOOD + "  - <<: 5\n    at: 4s\n")
    refused(p, f"{p}:6:", "<<")


SENSITIVE = "root:x:0:0:TOP-SECRET-CONTENT:/root:/bin/bash\ndaemon:x:1:1:more-secret-stuff:/usr/sbin\n"


@pytest.mark.parametrize("content", [
    SENSITIVE,
    '{"auths": {"registry": {"auth": "TOP-SECRET-CONTENT"}}}\n',  # JSON is YAML: a mapping, not a target
    "-----BEGIN PRIVATE KEY-----\nTOP-SECRET-CONTENT\n-----END PRIVATE KEY-----\n",
    "password = TOP-SECRET-CONTENT\n[section]\n  key: : TOP-SECRET-CONTENT: ]\n",  # not even YAML
    "- TOP-SECRET-CONTENT\n- more\n",
])
def test_a_foreign_file_named_as_target_is_never_echoed(tmp_path, content):
    secret_file = tmp_path / "passwd"
    secret_file.write_text(content)
    p = tmp_path / "exp.yaml"
    p.write_text(GOOD.replace("{kind: reference, replicas: 2, preset: tiny}", str(secret_file)))
    err = refused(p, str(secret_file), "not a target file")
    assert "TOP-SECRET" not in err and "secret-stuff" not in err and "auths" not in err
    # nor when the foreign file itself is validated or run
    for args in (["validate", str(secret_file)], ["run", str(secret_file), "--dry-run"]):
        code, out, err = command(*args)
        assert code == 2 and "TOP-SECRET" not in out + err


def test_etc_passwd_as_target(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(GOOD.replace("{kind: reference, replicas: 2, preset: tiny}", "/etc/passwd"))
    err = refused(p, "/etc/passwd", "not a target file", subprocess_too=True)
    assert "root:" not in err and "/bin/" not in err
    r = chaos("validate", "/etc/passwd")
    assert r.returncode == 2 and "root:" not in r.stdout + r.stderr and "Traceback" not in r.stderr
