"""A fault is one file: a class declares its typed settings, its checks, its warnings and what it does, and one line
registers it. Here a toy fault, defined in this file and registered for each test only, is validated by the
experiment schema, by `chaos validate` (with file:line:col), listed by `chaos list faults` and documented in the
generated reference, as a built-in fault is.
"""

import os
from dataclasses import dataclass

import pytest

from chaos.cli import main
from chaos.docgen import generate
from chaos.experiment import schema as S
from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment
from chaos.faults import FAULT_TYPES, Fault, Params, setting
from chaos.schemabits import INSTANCE, POSITIVE, integer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(slots=True, frozen=True, kw_only=True)
class JamParams(Params):
    instance: int | str = setting(INSTANCE, 0)
    duration: float | None = setting(POSITIVE, None)
    level: int = setting(integer(1, 5, "how hard the jam is (a jam beyond 3 takes a replica each)"))


class ToyJam(Fault):
    type = "toy_jam"
    summary = "jam instances at a level from 1 to 5 for duration"
    Params = JamParams
    schema = JamParams.schema("a toy fault, registered by its test only")
    needs_started_target = True

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        if fault["level"] > 3 and fault["level"] - 3 > target.replicas:
            return [(("level",), f"level {fault['level']} needs {fault['level'] - 3} replicas; the target has "
                                 f"{target.replicas}")]
        return []

    @classmethod
    def warnings(cls, spec, exp) -> list[str]:
        if spec.params.duration is None:
            return [f"fault {spec.name}: jammed until the end of the run"]
        return []

    def apply(self, ctx) -> None:
        self.applied = True

    def revert(self, ctx) -> None:
        self.reverted = True


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(FAULT_TYPES, ToyJam.type, ToyJam)  # the one line; monkeypatch takes it out again
    return ToyJam


def experiment(tmp_path, fault: str, name: str = "e.yaml", replicas: int = 1) -> str:
    p = tmp_path / name
    p.write_text(f"name: toy\ntarget: {{kind: reference, replicas: {replicas}, preset: tiny}}\n"
                 f"load: {{workload: chat, users: 1, duration: 30s}}\n"
                 f"faults:\n  - {fault}\n")
    return str(p)


def col(fault: str, token: str) -> int:
    """The column of token in the fault's line, as problems give it (1-based, after the list's "  - ")."""
    return len("  - ") + fault.index(token) + 1


def problems(path: str) -> list[str]:
    with pytest.raises(ExperimentError) as e:
        load_experiment(path)
    return e.value.problems


def test_registering_is_one_line_and_undoing_it_takes_the_type_out_again(monkeypatch):
    assert "toy_jam" not in S.FAULTS
    with monkeypatch.context() as m:
        m.setitem(FAULT_TYPES, ToyJam.type, ToyJam)
        assert "toy_jam" in S.FAULTS
        assert "toy_jam" in S.EXPERIMENT["properties"]["faults"]["items"]["properties"]["type"]["enum"]
    assert "toy_jam" not in S.FAULTS
    assert "toy_jam" not in S.EXPERIMENT["properties"]["faults"]["items"]["properties"]["type"]["enum"]


def test_unregistered_the_type_is_unknown(tmp_path):
    path = experiment(tmp_path, "{type: toy_jam, at: 5s, level: 2}")
    [p] = problems(path)
    assert p.startswith(f"{path}:5:12: faults[0].type: 'toy_jam' is not one of ")


def test_the_schema_takes_its_settings_and_refuses_bad_ones(tmp_path, toy):
    exp = load_experiment(experiment(tmp_path, "{type: toy_jam, at: 5s, level: 2, duration: 3s, instance: r0}"))
    [f] = exp.faults
    assert (f.type, f.at, f.params) == ("toy_jam", 5.0, JamParams(level=2, duration=3.0, instance="r0"))
    fault = "{type: toy_jam, at: 5s, level: 9, jam: 1}"
    path = experiment(tmp_path, fault, "bad.yaml")
    assert problems(path) == [f"{path}:5:{col(fault, 'jam:')}: faults[0].jam: unknown key 'jam'; allowed here: at, "
                              f"duration, instance, level, name, type",
                              f"{path}:5:{col(fault, '9')}: faults[0].level: 9 is out of range: from 1 to 5"]
    path = experiment(tmp_path, "{type: toy_jam, at: 5s}", "missing.yaml")
    assert problems(path) == [f"{path}:5:5: faults[0]: missing required key 'level'"]


def test_its_own_checks_and_the_generic_ones_run(tmp_path, toy):
    fault = "{type: toy_jam, at: 50s, level: 5, instance: r3}"
    path = experiment(tmp_path, fault)
    assert problems(path) == [
        f"{path}:5:{col(fault, '50s')}: faults[0].at: at 50s is not before the end of the load (30s): the fault "
        f"would never run",
        f"{path}:5:{col(fault, '5,')}: faults[0].level: level 5 needs 2 replicas; the target has 1",
        f"{path}:5:{col(fault, 'r3')}: faults[0].instance: no instance 'r3'; this target has r0"]
    p = tmp_path / "remote.yaml"
    p.write_text("name: toy\ntarget: {kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n"
                 "load: {workload: chat, users: 1, duration: 30s}\nfaults:\n  - {type: toy_jam, at: 5s, level: 1}\n")
    assert problems(str(p)) == [f"{p}:5:12: faults[0].type: toy_jam needs a target the run starts (reference, "
                                f"process, docker, stack), not openai"]


def test_chaos_validate_accepts_it_warns_and_reports_a_bad_setting_with_its_line(tmp_path, toy, capsys):
    good = experiment(tmp_path, "{type: toy_jam, at: 5s, level: 2}", "good.yaml")
    assert main(["validate", good]) == 0
    out, err = capsys.readouterr()
    assert out == f"{good}: ok (experiment)\n"
    assert err == f"warning: {good}: fault toy_jam#0: jammed until the end of the run\n"
    fault = "{type: toy_jam, at: 5s, level: 0}"
    bad = experiment(tmp_path, fault, "bad.yaml")
    assert main(["validate", bad]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {bad}:5:{col(fault, '0}')}: faults[0].level: 0 is out of range: from 1 to 5\n"


def test_chaos_list_faults_lists_it_with_its_summary(toy, capsys):
    assert main(["list", "faults"]) == 0
    out = capsys.readouterr().out
    instance_faults = out.split("\n\n")[0].split(":\n", 1)[1]  # the first family's lines, under its title
    assert f"  {'toy_jam':<19} jam instances at a level from 1 to 5 for duration\n" in instance_faults


def test_the_generated_reference_documents_it(toy):
    faults = next(text for path, text in generate(ROOT).items() if path.endswith("faults.md"))
    section = faults.split("### `toy_jam`\n\n", 1)[1].split("\n### ", 1)[0]
    assert section.startswith("jam instances at a level from 1 to 5 for duration.\n\n")
    assert ("| `level` | yes | a whole number from 1 to 5 | how hard the jam is (a jam beyond 3 takes a replica "
            "each) |") in section
    assert "| `duration` |  | a duration above 0 and at most 7 days" in section


def test_the_published_schema_lists_it(toy, capsys):
    assert main(["schema"]) == 0
    assert '"toy_jam"' in capsys.readouterr().out
