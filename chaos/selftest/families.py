"""The fault families `chaos selftest interrupts` interrupts: one short real experiment (or game day, or replay)
each, whose faults are all under way a second or two after its load starts.

Placeholders filled per trial: @LOG@ (a generated request log), @TOXIPROXY@ (a Toxiproxy API the trial started,
standing for a user's own), @DOCKER@ (the docker target's settings), @STACK@ (a stack of real engines: LiteLLM in
front of two llama.cpp servers, built by scripts/engines.sh). The hosts family needs root (network namespaces).
Every run is small: two tiny replicas, a few users, 8 s of load, so a trial costs ~10 s and the signal can land
anywhere in it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

TARGET = "{kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s}"
LOAD = ("{workload: chat, users: 3, duration: 8s, output_tokens: 4-12, "
        "timeouts: {connect: 2s, first_token: 5s, total: 10s}}")


def _experiment(name: str, faults: list[str], target: str = TARGET, load: str = LOAD) -> str:
    lines = [f"name: torture-{name}", f"target: {target}", f"load: {load}", "faults:"]
    return "\n".join(lines + [f"  - {f}" for f in faults]) + "\n"


@dataclass(slots=True, frozen=True)
class Family:
    name: str
    what: str          # one line, for the counts
    command: str       # run | gameday | replay
    text: str          # the experiment (run, gameday), or the target file (replay)
    horizon_s: float   # the signal comes uniformly within this many seconds of the command's start
    needs: str = ""    # docker | toxiproxy | engines | root: what the trial must provide

    def __post_init__(self):
        if self.command not in ("run", "gameday", "replay"):
            raise ValueError(f"family {self.name}: command must be run, gameday or replay")
        if self.horizon_s <= 0:
            raise ValueError(f"family {self.name}: horizon_s must be > 0")


INSTANCES = _experiment("instances", [
    "{type: pause_instance, at: 1s, instance: 0, duration: 3s}",
    "{type: server_hook, at: 1.5s, instance: 1, step_delay_ms: 20, duration: 3s}",
    "{type: kill_instance, at: 3s, instance: 1, signal: SIGKILL, restart_after: 1.5s}",
])

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("instances", "instance paused, engine slowed, instance SIGKILLed and restarted", "run", INSTANCES, 12),
    Family("toxics", "Toxiproxy latency and bandwidth toxics on the bundled server", "run", _experiment("toxics", [
        "{type: latency, at: 1s, link: r0, latency: 50ms, jitter: 20ms, duration: 5s}",
        "{type: bandwidth, at: 1.5s, link: r1, rate: 64, duration: 5s}",
    ]), 12),
    Family("toxics-url", "the same toxics on a Toxiproxy server given by URL (a user's own)", "run", _experiment(
        "toxics-url", [
            "{type: latency, at: 1s, link: r0, latency: 50ms, duration: 5s}",
            "{type: reset_peer, at: 2s, link: r1, timeout: 100ms, duration: 3s}",
        ], target="{kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s, "
                  "toxiproxy: {url: '@TOXIPROXY@'}}"), 12, needs="toxiproxy"),
    Family("link-down", "the client's link taken down, then a replica's", "run", _experiment("link-down", [
        "{type: link_down, at: 1s, link: client, duration: 2s}",
        "{type: link_down, at: 3.5s, link: r1, duration: 2s}",
    ]), 12),
    Family("llm", "LLM proxy rules: a stalled stream, injected 503s, slowed tokens", "run", _experiment("llm", [
        "{type: stream_stall, at: 1s, link: r1, after_tokens: 2, stall_for: 30s, duration: 4s}",
        "{type: http_error, at: 1s, link: client, status: 503, probability: 30%, duration: 4s}",
        "{type: token_delay, at: 1.5s, link: r0, delay: 20ms, duration: 4s}",
    ]), 12),
    Family("abnormal", "an abnormal_inputs batch in flight", "run", _experiment("abnormal", [
        "{type: abnormal_inputs, at: 1s, serve_within: 15s}",
    ]), 14),
    Family("replay", "a timed replay of a request log, with a replica killed", "run", _experiment(
        "replay", ["{type: kill_instance, at: 2s, instance: 0, signal: SIGTERM, restart_after: 1s}"],
        load="{workload: replay, replay: '@LOG@', replay_speed: 1, duration: 10s, "
             "timeouts: {connect: 2s, first_token: 5s, total: 10s}}"), 12),
    Family("docker", "docker containers paused and killed", "run", _experiment("docker", [
        "{type: pause_instance, at: 1s, instance: 0, duration: 3s}",
        "{type: kill_instance, at: 2.5s, instance: 1, restart_after: 1.5s}",
    ], target="@DOCKER@"), 14, needs="docker"),
    Family("stack", "real engines: a llama.cpp server SIGKILLed, a stream stalled between LiteLLM and the other",
           "run", _experiment("stack", [
               "{type: kill_instance, at: 1s, instance: r0, signal: SIGKILL, restart_after: 1.5s}",
               "{type: stream_stall, at: 1s, link: r1, after_tokens: 2, stall_for: 30s, duration: 4s}",
           ], target="@STACK@"), 24, needs="engines"),
    Family("hosts", "kernel faults on hosts (network namespaces): packet loss, a rate cap, TCP resets, a partition",
           "run", _experiment("hosts", [
               "{type: packet_loss, at: 1s, host: node-a, rate: 5%, duration: 4s}",
               "{type: link_rate, at: 1.2s, host: node-b, rate: 200, duration: 4s}",
               "{type: tcp_reset, at: 1.4s, host: node-b, peer: edge, rate: 1%, duration: 4s}",
               "{type: partition, at: 1.6s, host: node-a, peer: node-b, duration: 3s}",
           ], target="{kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s, gateway: {retries: 1}, "
                     "hosts: {edge: [gw], node-a: [r0], node-b: [r1]}}"), 12, needs="root"),
    Family("gameday", "`chaos gameday` of two experiments with instance faults", "gameday", INSTANCES, 24),
    Family("replay-cmd", "`chaos replay` of a timed log against a target file it starts", "replay",
           "kind: reference\nreplicas: 1\npreset: tiny\nstartup_timeout: 60s\n", 9),
]}


def write_log(path: str, n: int = 40, span_s: float = 6.0) -> str:
    """A timed request log: n chat requests over span_s seconds."""
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp": 1700000000 + span_s * i / n, "max_tokens": 4,
                                "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n")
    return path


def docker_target(image: str = "chaos-busybox:latest") -> str:
    """Two reference replicas in containers of a busybox image, with this machine's Python and this checkout
    mounted read-only (scripts/docker-engine.sh builds the image)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = {"/usr", "/lib", "/lib64", os.path.realpath(sys.base_prefix), sys.prefix, root}
    cmd = [sys.executable, "-m", "chaos", "reference", "serve", "--preset", "tiny", "--port", "{port}",
           "--replica-id", "d{replica}", "--threads", "1"]
    return json.dumps({"kind": "docker", "image": image, "replicas": 2, "command": cmd, "model": "chaos-reference",
                       "volumes": {p: p for p in sorted(paths) if os.path.exists(p)}, "startup_timeout": "60s"})


def docker_missing(image: str = "chaos-busybox:latest") -> str | None:
    """Why the docker family cannot run here, or None."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get(image)
    except Exception as e:  # noqa: BLE001 - any failure means: no engine, or no image
        return (f"no Docker engine with {image} ({type(e).__name__}); as root, `source scripts/docker-engine.sh` "
                f"starts one and builds it")
    return None


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def engines_dir() -> str:
    return os.environ.get("CHAOS_ENGINES") or os.path.join(_root(), ".engines")


def stack_target() -> str:
    """The shipped LiteLLM-in-front-of-two-llama.cpp-servers target, by its path (its template is beside it)."""
    return json.dumps(os.path.join(_root(), "targets", "stacks", "litellm-llama-cpp.yaml"))


def hosts_missing() -> str | None:
    """Why the hosts family cannot run here (no root, no iproute2 or nftables), or None."""
    from ..netns import why_not

    return why_not()


def engines_missing() -> str | None:
    """Why the stack family cannot run here, or None."""
    e = engines_dir()
    need = [os.path.join(e, "litellm", "bin", "litellm"), os.path.join(e, "llama-cpp", "bin", "llama-server"),
            os.path.join(e, "models", "tiny.gguf")]
    missing = [p for p in need if not os.path.exists(p)]
    if missing:
        return f"{', '.join(missing)} not built: scripts/engines.sh litellm llama-cpp"
    return None
