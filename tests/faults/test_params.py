"""A fault's settings are a typed dataclass: the schema is derived from its fields, the loader builds it once
(durations in seconds, percentages as fractions), and one built by hand stops at a bad value."""

import pytest

from chaos.experiment.model import load_experiment
from chaos.faults import FAULT_TYPES, ParamsError
from chaos.faults.instance import KillParams, PauseParams
from chaos.faults.network import NETWORK_FAULTS


def test_every_fault_type_declares_its_settings_and_its_schema_is_theirs():
    for t, cls in FAULT_TYPES.items():
        assert cls.Params.__dataclass_params__.frozen, t
        derived = cls.Params.schema()
        assert cls.schema["properties"] == derived["properties"], t
        assert cls.schema.get("required", []) == derived.get("required", []), t


def test_the_loader_builds_them_typed_with_their_defaults(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("name: t\ntarget: {kind: reference, replicas: 2, preset: tiny}\n"
                 "load: {workload: chat, users: 1, duration: 40s}\n"
                 "faults:\n"
                 "  - {type: kill_instance, at: 5s, instance: r1, restart_after: 1.5m}\n"
                 "  - {type: latency, at: 5s, link: r0, latency: 250ms, toxicity: 40%, duration: 10s}\n"
                 "  - {type: http_error, at: 5s, status: 429, probability: 5%, retry_after: 2s}\n")
    kill, latency, error = (f.params for f in load_experiment(str(p)).faults)
    assert kill == KillParams(instance="r1", count=1, signal="SIGKILL", restart_after=90.0)
    assert (latency.link, latency.latency, latency.jitter, latency.toxicity, latency.stream, latency.duration) == \
        ("r0", 0.25, None, 0.4, "downstream", 10.0)
    assert (error.status, error.probability, error.retry_after, error.link, error.seed) == \
        (429, 0.05, 2.0, "client", None)


def test_built_by_hand_a_bad_value_stops_with_its_name():
    with pytest.raises(ParamsError, match=r"KillParams.count: 0 is less than the minimum of 1"):
        KillParams(count=0)
    with pytest.raises(ParamsError, match=r"KillParams.signal: 'SIGHUP' is not one of"):
        KillParams(signal="SIGHUP")
    with pytest.raises(TypeError, match="duration"):
        PauseParams()  # required: no default


def test_build_names_what_it_cannot_take():
    with pytest.raises(ParamsError, match="has no setting colour") as e:
        KillParams.build({"colour": "red"})
    assert "instance, count, signal, restart_after" in e.value.hint
    with pytest.raises(ParamsError, match="PauseParams needs duration"):
        PauseParams.build({"instance": 1})
    latency = next(c for c in NETWORK_FAULTS if c.type == "latency")
    with pytest.raises(ParamsError, match="latency"):
        latency.Params.build({"latency": "soon"})


def test_to_dict_is_what_is_set():
    assert KillParams(restart_after=4.0).to_dict() == {"instance": 0, "count": 1, "signal": "SIGKILL",
                                                       "restart_after": 4.0}
    assert KillParams().to_dict() == {"instance": 0, "count": 1, "signal": "SIGKILL"}
