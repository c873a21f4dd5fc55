import pytest

from .util import replicas, stop


@pytest.fixture(scope="session")
def pair():
    """Two real tiny replicas shared by the gateway tests that leave them as they found them (faults reverted).
    They saturate fast: one request running, one waiting, the rest 429 with Retry-After 2.5 s."""
    rs = replicas(2, "--max-num-seqs", "1", "--max-waiting", "1", "--retry-after", "2.5")
    try:
        yield rs
    finally:
        stop(*rs)
