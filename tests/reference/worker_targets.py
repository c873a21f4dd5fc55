"""Body-worker targets for the tests: run in serving.BodyWorker's child process, which inherits the test's
environment (CHAOS_TEST_HOLD_DIR names a folder the test and the child share)."""

import os
import time


def hold(body: bytes, meta: dict) -> dict:
    """Note the call in HOLD_DIR/calls, then wait until HOLD_DIR/release exists (at most 60 s): a parse that
    takes as long as the test wants. The reply is a 400, so the request never needs the engine."""
    folder = os.environ["CHAOS_TEST_HOLD_DIR"]
    with open(os.path.join(folder, "calls"), "a") as f:
        f.write(f"{len(body)}\n")
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"error": [400, "held, then released", "invalid_request_error", None, "held"]}
