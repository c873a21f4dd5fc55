"""Loading a local checkpoint (config.json + *.safetensors) the test writes itself."""

import json
import urllib.request

import pytest
from safetensors.torch import load_file, save_file

from chaos.reference.config import EngineConfig, ModelConfig, preset
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.engine.sequence import SamplingParams
from chaos.reference.launcher import start_server
from chaos.reference.loader import CheckpointError, save_checkpoint
from chaos.reference.model import CausalLM

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
PROMPT = [256] + list(b"checkpoint test prompt")


def write_checkpoint(path, cfg: ModelConfig, seed: int):
    model = CausalLM(cfg)
    model.init_random(seed, cfg.init_std)
    save_checkpoint(model, str(path))
    return model


@pytest.mark.parametrize("qwen3", [False, True])
def test_checkpoint_weights_are_the_ones_used(tmp_path, qwen3):
    cfg = preset("tiny")
    cfg.qk_norm = cfg.tie_word_embeddings = qwen3
    write_checkpoint(tmp_path, cfg, seed=5)
    loaded_cfg = ModelConfig.from_checkpoint(str(tmp_path))
    assert loaded_cfg.qk_norm == qwen3 and loaded_cfg.tie_word_embeddings == qwen3
    from_ckpt = LLMEngine(EngineConfig(model=loaded_cfg, checkpoint=str(tmp_path))).generate([PROMPT], GREEDY)[0]
    cfg5 = ModelConfig.from_hf_dict({**cfg.to_hf_dict(), "seed": 5})
    same_seed = LLMEngine(EngineConfig(model=cfg5)).generate([PROMPT], GREEDY)[0]
    other_seed = LLMEngine(EngineConfig(model=cfg)).generate([PROMPT], GREEDY)[0]
    assert from_ckpt.token_ids == same_seed.token_ids
    assert from_ckpt.token_ids != other_seed.token_ids


def test_checkpoint_mismatch_is_a_clear_error(tmp_path):
    cfg = preset("tiny")
    write_checkpoint(tmp_path, cfg, seed=1)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"][:, :10].contiguous()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="up_proj.weight: checkpoint shape"):
        LLMEngine(EngineConfig(model=cfg, checkpoint=str(tmp_path)))
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        LLMEngine(EngineConfig(model=cfg, checkpoint=str(tmp_path / "nowhere")))


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_server_serves_a_checkpoint(tmp_path):
    cfg = preset("tiny")
    write_checkpoint(tmp_path, cfg, seed=9)
    expected = LLMEngine(EngineConfig(model=ModelConfig.from_checkpoint(str(tmp_path)),
                                      checkpoint=str(tmp_path))).generate([PROMPT], GREEDY)[0]
    with start_server(["--checkpoint", str(tmp_path), "--replica-id", "ck"]) as s:
        body = json.dumps({"model": "chaos-reference", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(s.base_url + "/v1/completions", body, {"Content-Type": "application/json"})
        got = json.load(urllib.request.urlopen(req))
    assert got["choices"][0]["text"] == expected.text
    assert got["usage"]["completion_tokens"] == 16
