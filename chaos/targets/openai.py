"""A remote OpenAI-compatible endpoint: nothing to start, only to reach.

The key stays in the environment: only the variable's name is kept, and its value is read each time a request
is made (here for health checks; the load reads it per request the same way), so it is in no file, journal or
report. The experiment model has already refused credentials, a query or a fragment inside base_url and a
non-loopback host without allow_remote: true; the url kept here is rebuilt from scheme, host, port and path
all the same, so nothing else of base_url can reach a journal or a request.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from .base import Instance, Target, TargetError, http_ok


class OpenAITarget(Target):
    kind = "openai"
    starts_processes = False

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        s = spec.settings
        self.model = s["model"]
        self.api_key_env = spec.api_key_env
        from .limits import Limits

        self.limits = Limits.from_dict(s.get("limits"))
        u = urlparse(spec.base_url)
        port = u.port or (443 if u.scheme == "https" else 80)
        # The id is what journals and reports show: host and port only, never anything from userinfo.
        host = f"[{u.hostname}]" if ":" in (u.hostname or "") else u.hostname
        base = f"{u.scheme}://{host}{f':{u.port}' if u.port else ''}{u.path}".rstrip("/")
        self.instances.append(Instance(0, f"{host}:{port}", base, port,
                                       metrics_path=s.get("metrics_path", "/metrics")))

    def _headers(self) -> dict:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise TargetError(f"the API key variable {self.api_key_env} is not set; export it before the run")
        return {"Authorization": f"Bearer {key}"}

    def healthy(self, inst: Instance) -> bool:
        return http_ok(inst.url + "/models", timeout=10, headers=self._headers())

    def up(self, should_stop=lambda: False) -> None:
        inst = self.instances[0]
        if not self.healthy(inst):
            raise TargetError(f"cannot reach {inst.url}/models (or it refused the key); check base_url, "
                              f"model and {self.api_key_env or 'api_key_env'}")
        inst.state = "up"

    def down(self, grace: float = 10.0) -> None:
        pass
