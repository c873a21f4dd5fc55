"""One export: the objects built, checked, and written as files, with what was left out.

Nothing is written unless everything passed: each object against its schema (chaos.export.schemas,
kubeschemas), every file against the experiment's secrets (its mask: a secret variable's value, the API key
behind api_key_env), and beside.yaml through the loader that `chaos run` uses. A failure there is a bug of the
export, not of the experiment, and stops it with a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import yaml

from .. import __version__
from ..errors import InputError
from . import beside, kubeschemas, locust, schemas
from .chaosmesh import Injection, Left, map_faults
from .config import ExportConfig
from .kube import object_name
from .readme import not_exported, readme
from .workflow import schedule, workflow

MANIFEST = ".chaos-export.json"  # what the last export wrote here, so a new one replaces exactly that


@dataclass(slots=True)
class Bundle:
    exp: object
    cfg: ExportConfig
    out: str
    injections: list[Injection]
    left: list[Left]
    files: dict[str, str] = field(default_factory=dict)  # path under out -> text
    notes: list[str] = field(default_factory=list)  # the beside experiment's


class _Dumper(yaml.SafeDumper):
    """Block style for text of several lines (the load's config, the replay log), as a person would write it."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                             style="|" if "\n" in s else None))


def dump(docs: list[dict], header: str) -> str:
    return header + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)


def build(exp, cfg: ExportConfig, out: str) -> Bundle:
    injections, left = map_faults(exp, cfg)
    b = Bundle(exp, cfg, out, injections, left)
    header = (f"# {exp.name}: written by chaos export from {os.path.basename(exp.path)} (llm-chaos {__version__}).\n"
              f"# Checked against schemas written from Chaos Mesh {schemas.CHAOS_MESH_VERSION}'s CRDs and docs and "
              f"Kubernetes' API reference;\n# no Kubernetes cluster ran it where it was written. README.md says how "
              f"to apply it.\n")
    # HTTPChaos misses connections opened before it: the load opens one per request when it is used
    load = locust.resources(exp, cfg, keep_alive=not any(i.kind == "HTTPChaos" for i in injections))
    chaos = []
    if injections:
        chaos = [schedule(exp.name, cfg.namespace, injections, cfg.schedule) if cfg.schedule
                 else workflow(exp.name, cfg.namespace, injections)]
    for doc in load + chaos:
        check = schemas.problems if doc["apiVersion"].startswith("chaos-mesh.org") else kubeschemas.problems
        if found := check(doc):
            raise AssertionError(f"chaos export made an invalid {doc['kind']} {doc['metadata']['name']}: "
                                 f"{'; '.join(found)}. This is a bug of llm-chaos: please report it with the "
                                 f"experiment file")
    for i, doc in enumerate(load):
        b.files[f"load/{i:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"] = dump([doc], header)
    for doc in chaos:
        b.files[f"chaos/{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"] = dump([doc], header)
    _beside(b, header)
    if left:
        b.files["NOT-EXPORTED.md"] = not_exported(b)
    b.files["README.md"] = readme(b, load, chaos)
    for path, text in b.files.items():
        if exp.mask(text) != text:
            raise AssertionError(f"chaos export would write a secret's value into {path}; this is a bug of "
                                 f"llm-chaos: please report it (without the secret)")
    return b


def _beside(b: Bundle, header: str) -> None:
    exp, cfg = b.exp, b.cfg
    replay = os.path.basename(exp.load.replay) if exp.load.replay else None
    made = beside.experiment(exp, cfg, b.left, replay)
    if made is None:
        return
    doc, b.notes = made
    files = {beside.EXPERIMENT_FILE: dump([doc], header),
             beside.TARGET_FILE: dump([beside.target(exp, cfg, locust.model_of(exp, cfg))], header)}
    if replay is not None:
        with open(exp.load.replay, encoding="utf-8") as f:
            files[replay] = f.read()
    with tempfile.TemporaryDirectory() as tmp:  # what chaos run will load, loaded now
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        from ..experiment.model import load_experiment

        try:
            load_experiment(os.path.join(tmp, beside.EXPERIMENT_FILE))
        except InputError as e:
            raise AssertionError(f"chaos export made a beside.yaml that chaos run refuses ({e}); this is a bug of "
                                 f"llm-chaos: please report it with the experiment file") from e
    b.files.update(files)


def write(b: Bundle) -> list[str]:
    """The files under out, replacing what an earlier export wrote there; out must be empty or an export's."""
    manifest = os.path.join(b.out, MANIFEST)
    if os.path.isdir(b.out) and os.listdir(b.out) and not os.path.exists(manifest):
        raise InputError(f"{b.out} is not empty and no export of chaos export: give --out a new folder")
    if os.path.exists(b.out) and not os.path.isdir(b.out):
        raise InputError(f"--out {b.out} is a file: give a folder")
    if os.path.exists(manifest):  # an earlier export's files go: a Workflow left there would be applied again
        with open(manifest, encoding="utf-8") as f:
            for path in json.load(f).get("files", []):
                full = os.path.normpath(os.path.join(b.out, path))
                if full.startswith(os.path.normpath(b.out) + os.sep) and os.path.isfile(full):
                    os.remove(full)
        for sub in ("load", "chaos"):
            if os.path.isdir(os.path.join(b.out, sub)) and not os.listdir(os.path.join(b.out, sub)):
                shutil.rmtree(os.path.join(b.out, sub))
    for path, text in b.files.items():
        full = os.path.join(b.out, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump({"experiment": b.exp.name, "llm-chaos": __version__, "files": sorted(b.files)}, f, indent=1)
    return sorted(b.files)


def default_out(exp) -> str:
    return os.path.join("exports", f"{object_name(exp.name)}-chaos-mesh")
