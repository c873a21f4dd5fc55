"""Load a local checkpoint of the same architecture: a folder with config.json and *.safetensors."""

from __future__ import annotations

import glob
import os

import torch

from ..errors import InputError
from .model import CausalLM


class CheckpointError(InputError, ValueError):
    pass


def load_checkpoint(model: CausalLM, path: str) -> None:
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise CheckpointError(f"no *.safetensors files in {path}")
    params = dict(model.named_parameters())
    seen: set[str] = set()
    with torch.no_grad():
        for f in files:
            for name, tensor in load_file(f).items():
                if name not in params:
                    if name.endswith("rotary_emb.inv_freq") or (
                            name == "lm_head.weight" and model.config.tie_word_embeddings):
                        continue
                    raise CheckpointError(f"{os.path.basename(f)}: unexpected tensor {name!r}")
                if params[name].shape != tensor.shape:
                    raise CheckpointError(f"{name}: checkpoint shape {tuple(tensor.shape)} != "
                                          f"model shape {tuple(params[name].shape)}")
                params[name].copy_(tensor)
                seen.add(name)
    missing = set(params) - seen
    if model.config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    if missing:
        raise CheckpointError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[0]!r}")


def save_checkpoint(model: CausalLM, path: str) -> None:
    """Write config.json + model.safetensors (used by tests and to export a preset)."""
    import json

    from safetensors.torch import save_file

    if getattr(model, "fused", False):
        raise ValueError("save_checkpoint needs an unfused model (fuse() merges the HF projections)")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(model.config.to_hf_dict(), f, indent=2)
    tensors = {n: p.detach().contiguous().cpu() for n, p in model.named_parameters()}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    save_file(tensors, os.path.join(path, "model.safetensors"))
