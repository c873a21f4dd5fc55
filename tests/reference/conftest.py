import os
import secrets

import pytest

from chaos.common import FAULT_TOKEN_ENV
from chaos.reference.config import EngineConfig, preset
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.launcher import start_server


def make_engine(**kw) -> LLMEngine:
    model = kw.pop("model", None) or preset("tiny")
    kw.setdefault("max_model_len", 1024)
    return LLMEngine(EngineConfig(model=model, **kw))


@pytest.fixture(scope="package", autouse=True)
def fault_token():
    """One fault token for this package's tests: every replica they start with --enable-fault-hooks inherits it
    from the environment, and http_util.fault_headers sends it on /admin/ paths. Package-scoped, so the
    environment is as it was once these tests end (tests elsewhere, tests/run's, never see it). The gateway's
    tests take each replica's own token from start_server, which is this one while it is set."""
    saved = os.environ.get(FAULT_TOKEN_ENV)
    os.environ[FAULT_TOKEN_ENV] = saved or secrets.token_urlsafe(24)
    yield os.environ[FAULT_TOKEN_ENV]
    if saved is None:
        os.environ.pop(FAULT_TOKEN_ENV, None)
    else:
        os.environ[FAULT_TOKEN_ENV] = saved


@pytest.fixture
def engine():
    return make_engine()


@pytest.fixture(scope="package")
def server(fault_token):
    """One tiny-preset replica with fault hooks, shared by the API tests (each reverts what it sets)."""
    with start_server(["--preset", "tiny", "--replica-id", "t0", "--enable-fault-hooks", "--max-waiting", "64",
                       "--default-max-tokens", "32", "--fault-seed", "1", "--retry-after", "2.5"]) as s:
        assert s.fault_token == fault_token
        yield s
