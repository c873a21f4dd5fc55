"""Containers through the docker SDK against a real dockerd, each with --network host so it listens on loopback.

No image is pulled: the image must exist locally (here one is made with `docker import`; see
docs/experiments.md). Instance faults use the engine's verbs: kill with a signal, pause/unpause.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .base import Instance, TargetError
from .process import CommandSettings, CommandTarget

try:
    import docker
    from docker.errors import DockerException, NotFound
except ImportError:  # the SDK is a dependency; this only guards odd installs
    docker = None


def client_for(host: str | None):
    if docker is None:
        raise TargetError("the docker Python SDK is not installed (pip install docker)")
    try:
        c = docker.DockerClient(base_url=host) if host else docker.from_env()
        c.ping()
        return c
    except DockerException as e:
        where = host or os.environ.get("DOCKER_HOST") or "the default socket"
        raise TargetError(f"cannot reach a Docker engine at {where}: {e}. Start dockerd, or set docker_host in "
                          f"the target file (or DOCKER_HOST)") from None


@dataclass(slots=True, frozen=True)
class DockerSettings(CommandSettings):
    """A docker target's own settings: a process target's, and its image, mounts and engine."""

    image: str = ""
    volumes: dict[str, str] = field(default_factory=dict)  # host path: container path, mounted read-only
    docker_host: str | None = None

    @classmethod
    def from_dict(cls, s: dict, **more) -> DockerSettings:
        return super(DockerSettings, cls).from_dict(s, image=s["image"], volumes=dict(s.get("volumes") or {}),
                                                    docker_host=s.get("docker_host"), **more)


class DockerTarget(CommandTarget):
    kind = "docker"
    Settings = DockerSettings
    prefix, log_name = "d", "container"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        self.host = self.conf.docker_host or os.environ.get("DOCKER_HOST")
        self.client = None
        self.label = os.path.abspath(out_dir)

    def _client(self):
        if self.client is None:
            self.client = client_for(self.host)
        return self.client

    def command(self, inst: Instance) -> list[str] | None:
        return self.conf.words(inst)

    def start_instance(self, inst: Instance) -> None:
        c = self._client()
        image = self.conf.image
        try:
            c.images.get(image)
        except NotFound:
            raise TargetError(f"image {image!r} is not on the engine and nothing is pulled here: build it with "
                              f"`docker import` (see docs/experiments.md)") from None
        volumes = {h: {"bind": v, "mode": "ro"} for h, v in self.conf.volumes.items()}
        env = {**self.conf.env, "PORT": str(inst.port)}
        if os.environ.get("CHAOS_RUN_ID"):  # a container does not inherit the runner's environment: pass the mark
            env["CHAOS_RUN_ID"] = os.environ["CHAOS_RUN_ID"]
        try:
            container = c.containers.run(image, self.command(inst), detach=True, network_mode="host",
                                         volumes=volumes, environment=env, labels={"llm-chaos.run": self.label},
                                         name=f"chaos-{os.getpid()}-{inst.id}-{int(time.time() * 1000) % 10**8}")
        except DockerException as e:
            raise TargetError(f"docker could not start {image!r} for {inst.id}: {e}") from None
        inst.container, inst.engine = container.id, self.host
        inst.state = "starting"
        self.on_spawn(inst)

    def _container(self, inst: Instance):
        try:
            return self._client().containers.get(inst.container)
        except (NotFound, DockerException):
            return None

    def wait_healthy(self, inst: Instance, timeout: float, should_stop=lambda: False) -> None:
        c = None

        def exited() -> str | None:
            nonlocal c
            c = self._container(inst)
            if c is not None and c.status == "exited":
                logs = c.logs(tail=5).decode(errors="replace").strip()
                return f"container {inst.id} exited before it was healthy: {logs[-300:]}"
            return None

        def pause() -> None:
            time.sleep(0.2)
            if c is not None:
                c.reload()

        if not self._poll_healthy(inst, timeout, should_stop, exited, pause):
            raise TargetError(f"container {inst.id} did not become healthy at {self.health_url(inst)} within "
                              f"{self.spec.startup_timeout:.0f}s")

    def up(self, should_stop=lambda: False) -> None:
        for inst in self.instances:
            self.start_instance(inst)
        for inst in self.instances:
            self.wait_healthy(inst, self.spec.startup_timeout, should_stop)

    def down(self, grace: float = 10.0) -> None:
        for inst in reversed(self.instances):  # one docker client: one call at a time
            self.stop_instance(inst, grace)

    def stop_instance(self, inst: Instance, grace: float = 10.0) -> None:
        c = self._container(inst) if inst.container else None
        if c is not None:
            try:
                if inst.log_path:
                    with open(inst.log_path, "ab") as f:
                        f.write(c.logs())
                if c.status == "paused":
                    c.unpause()
                c.stop(timeout=max(0, int(grace)))
            except DockerException:
                pass
            try:
                c.remove(force=True)
            except DockerException:
                pass
        inst.state, inst.up_since = "down", None

    def kill_instance(self, inst: Instance, sig) -> None:
        c = self._container(inst)
        if c is not None:
            try:
                c.kill(signal=sig.name)
            except DockerException:
                pass
        inst.state, inst.up_since = "down", None

    def pause_instance(self, inst: Instance) -> None:
        c = self._container(inst)
        if c is not None:
            c.pause()
        inst.state = "paused"

    def resume_instance(self, inst: Instance) -> None:
        c = self._container(inst)
        if c is not None:
            try:
                c.unpause()
            except DockerException:
                pass
        inst.state = "up"

    def describe(self) -> dict:
        d = super().describe()
        d["docker_host"] = self.host
        return d


def unpause_container(container_id: str, host: str | None = None) -> bool:
    try:
        c = client_for(host).containers.get(container_id)
        if c.status == "paused":
            c.unpause()
            return True
    except (TargetError, DockerException):
        pass
    return False


def remove_container(container_id: str, host: str | None = None) -> bool:
    try:
        client_for(host).containers.get(container_id).remove(force=True)
        return True
    except (TargetError, DockerException):
        return False
