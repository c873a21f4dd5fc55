import os
import secrets

import pytest

from chaos.reference.config import EngineConfig, preset
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.launcher import start_server

# One fault token for the session: every replica started with --enable-fault-hooks inherits it from this
# environment, and http_util sends it on /admin/ paths (the gateway's tests included).
os.environ.setdefault("CHAOS_FAULT_TOKEN", secrets.token_urlsafe(24))


def make_engine(**kw) -> LLMEngine:
    model = kw.pop("model", None) or preset("tiny")
    kw.setdefault("max_model_len", 1024)
    return LLMEngine(EngineConfig(model=model, **kw))


@pytest.fixture
def engine():
    return make_engine()


@pytest.fixture(scope="session")
def server():
    """One tiny-preset replica with fault hooks, shared by the API tests (each reverts what it sets)."""
    with start_server(["--preset", "tiny", "--replica-id", "t0", "--enable-fault-hooks", "--max-waiting", "64",
                       "--default-max-tokens", "32", "--fault-seed", "1", "--retry-after", "2.5"]) as s:
        yield s
