"""Reach a target for a load: a URL as it is, or a target file started, health-checked and always stopped.

    with reached("targets/vendors/openai.yaml", {"OPENAI_MODEL": "gpt-4o-mini"}) as r:
        LoadConfig(target=r.base_url, also=r.urls[1:], model=r.model, api_key_env=r.api_key_env, limits=r.limits)

The key is read from the variable the file names and kept only in headers, which no repr shows.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator
from urllib.parse import urlparse

from ..targets.base import TargetError

if TYPE_CHECKING:
    from ..experiment.model import TargetSpec
    from ..targets.limits import Limits
    from ..targets.base import Target

HEALTH_TIMEOUT = 5.0


@dataclass(slots=True)
class Reached:
    base_url: str  # where the load goes, as `chaos load` takes it: http://127.0.0.1:8000 or https://host/v1
    model: str  # "" when a URL lists none (then the load needs --model)
    headers: dict = field(repr=False)  # Authorization from the key variable: never printed
    name: str
    limits: Limits | None = None  # what a vendor file states: the load is capped to them
    spec: TargetSpec | None = None  # a target file's, None for a URL
    urls: list[str] = field(default_factory=list)  # every front the load may rotate over (base_url first)
    api_key_env: str | None = None  # the NAME of the key's variable, for the load to read per request
    target: Target | None = field(default=None, repr=False)  # a file's started target (its instances, pids)

    @property
    def ignore_eos(self) -> bool:
        return True if self.spec is None else self.spec.ignore_eos


def is_url(target: str) -> bool:
    return urlparse(target).scheme in ("http", "https")


def api_base(url: str) -> str:
    """The OpenAI API root of a load URL: its path, or /v1 when it has none (the convention of `chaos load`)."""
    u = urlparse(url)
    return f"{u.scheme}://{u.netloc}{u.path.rstrip('/') or '/v1'}"


def key_headers(api_key_env: str | None) -> dict:
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise TargetError(f"the API key variable {api_key_env} is not set; export it before the load "
                          f"(export {api_key_env}=...)")
    return {"Authorization": f"Bearer {key}"}


def _get(url: str, headers: dict, timeout: float):
    """(status, parsed JSON or None); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
            body = r.read(1 << 20)
            try:
                return r.status, json.loads(body) if body else None
            except ValueError:
                return r.status, None
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _first_model(data) -> str:
    models = data.get("data") if isinstance(data, dict) else None
    ids = [m.get("id") for m in models or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids[0] if ids else ""


def check_url(url: str, headers: dict, timeout: float = HEALTH_TIMEOUT) -> str:
    """Health-check a load URL: GET {api}/models, else GET /health. Returns the first model listed ("" if none);
    TargetError when nothing answers or the key is refused."""
    models = api_base(url) + "/models"
    status, data = _get(models, headers, timeout)
    if 200 <= status < 300:
        return _first_model(data)
    if status in (401, 403):
        raise TargetError(f"{models} refused the key ({status}); check the API key variable's value")
    u = urlparse(url)
    health = f"{u.scheme}://{u.netloc}/health"
    hstatus, _ = _get(health, headers, timeout)
    if 200 <= hstatus < 300:
        return ""
    if status == 0 and hstatus == 0:
        raise TargetError(f"nothing answers at {url} (tried {models} and {health} for {timeout:g}s each); start "
                          f"the server first (e.g. chaos reference serve --port 8000) or check the URL")
    raise TargetError(f"{url} is not healthy: GET {models} answered {status or 'nothing'}, GET {health} "
                      f"{hstatus or 'nothing'}; wait until it serves, or check the URL")


@contextmanager
def reached(target: str, variables: dict[str, str] | None = None, out_dir: str | None = None,
            progress=lambda line: None, api_key_env: str | None = None) -> Iterator[Reached]:
    """TARGET is a URL (reached as is) or a target file (started, health-checked, always stopped on exit, also
    on an exception or KeyboardInterrupt). api_key_env: the key's variable for a URL (a file names its own).
    out_dir: where a file's processes log (default: a fresh temporary directory)."""
    if is_url(target):
        headers = key_headers(api_key_env)
        model = check_url(target, headers)
        yield Reached(base_url=target, model=model, headers=headers, name=target, urls=[target],
                      api_key_env=api_key_env)
        return
    if not os.path.isfile(target):
        raise TargetError(f"TARGET {target!r} is neither a URL (http://127.0.0.1:8000) nor a target file")
    from ..experiment.loader import ExperimentError
    from ..experiment.model import load_target
    from ..targets import make_target

    try:
        spec, _ = load_target(target, variables or {})
    except ExperimentError as e:
        raise TargetError(f"{target} is not a valid target file:\n  " + "\n  ".join(e.problems)
                          + "\n(fix the file, or give its variables with --var NAME=VALUE)") from None
    key_env = spec.api_key_env
    headers = key_headers(key_env)  # before anything starts: a missing key costs no start-up
    out = out_dir or tempfile.mkdtemp(prefix="chaos-target-")
    os.makedirs(out, exist_ok=True)
    t = make_target(spec, out)
    progress(f"starting the target {spec.name} ({spec.kind}) ...")
    try:
        try:
            t.up()
        except TargetError as e:
            raise TargetError(f"the target {spec.name} ({target}) did not come up: {e}") from None
        urls = t.urls
        listed = check_url(urls[0], headers)
        progress(f"target {spec.name} is up at {urls[0]}")
        yield Reached(base_url=urls[0], model=t.model or listed, headers=headers, name=spec.name,
                      limits=t.limits, spec=spec, urls=urls,
                      api_key_env=key_env, target=t)
    finally:
        if t.starts_processes:
            progress(f"stopping the target {spec.name} ...")
        t.down(grace=5.0)
