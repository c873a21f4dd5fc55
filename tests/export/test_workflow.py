"""chaos/export/workflow.py: each fault waits for its `at` in a Suspend, then lasts its deadline; a game day is a
Schedule of the same workflow."""

from chaos.export import schemas
from chaos.export.chaosmesh import map_faults
from chaos.export.workflow import schedule, workflow

from .conftest import config


def test_each_fault_waits_for_its_at_then_lasts_its_duration(make_exp):
    exp = make_exp([{"type": "kill_instance", "name": "kill-r1", "at": "15s", "instance": "r1",
                     "restart_after": "5s"},
                    {"type": "latency", "name": "slow", "at": 0, "latency": "250ms", "duration": "1500ms"}])
    done, _ = map_faults(exp, config())
    wf = workflow(exp.name, "ns", done)
    by = {t["name"]: t for t in wf["spec"]["templates"]}
    assert wf["spec"]["entry"] == "t-exp" and by["t-exp"] == {"name": "t-exp", "templateType": "Parallel",
                                                              "children": ["kill-r1-at", "slow"]}
    assert by["kill-r1-at"]["children"] == ["kill-r1-wait", "kill-r1"]
    assert by["kill-r1-wait"] == {"name": "kill-r1-wait", "templateType": "Suspend", "deadline": "15s"}
    assert by["kill-r1"]["deadline"] == "5s" and by["kill-r1"]["podChaos"]["action"] == "pod-kill"
    assert by["slow"]["deadline"] == "1500ms" and "slow-wait" not in by  # at 0: no wait
    assert schemas.problems(wf) == []


def test_a_game_day_is_a_schedule_of_the_workflow(make_exp):
    exp = make_exp([{"type": "kill_instance", "at": "5s"}], name="a-rather-long-experiment-name-for-a-schedule-x")
    done, _ = map_faults(exp, config())
    s = schedule(exp.name, "ns", done, "0 3 * * 1")
    assert s["kind"] == "Schedule" and len(s["metadata"]["name"]) <= 51
    assert s["spec"]["type"] == "Workflow" and s["spec"]["concurrencyPolicy"] == "Forbid"
    assert s["spec"]["workflow"]["entry"] == s["metadata"]["name"]
    assert schemas.problems(s) == []
