"""Experiments made for the export's tests: an inline reference target, a fixed load, and the faults a test
gives."""

import pytest
import yaml

from chaos.experiment.model import load_experiment
from chaos.export.config import ExportConfig, Placement

LOAD = {"workload": "chat", "users": 2, "duration": "60s", "input_tokens": "30-80", "output_tokens": "16-32",
        "timeouts": {"connect": "2s", "first_token": "10s", "total": "30s"}}


@pytest.fixture
def make_exp(tmp_path):
    """make_exp(faults, target=..., load=...) -> the loaded Experiment of a file written in tmp_path."""
    def make(faults, target=None, load=None, name="t-exp"):
        doc = {"name": name, "target": target or {"kind": "reference", "replicas": 2},
               "load": load or LOAD, "faults": faults}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_experiment(str(path))
    return make


def config(**kw) -> ExportConfig:
    kw.setdefault("service", "llm")
    kw.setdefault("namespace", "ns")
    if "instances" in kw:
        kw["instances"] = dict(Placement.parse(t) for t in kw["instances"])
    return ExportConfig(**kw)
