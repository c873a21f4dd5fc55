"""Targets: the systems under test a run starts (reference, process, docker, a user's stack) or reaches (openai)."""

from .base import Instance, Target, TargetError


def make_target(spec, out_dir: str) -> Target:
    if spec.kind == "reference":
        from .reference import ReferenceTarget
        return ReferenceTarget(spec, out_dir)
    if spec.kind == "process":
        from .process import ProcessTarget
        return ProcessTarget(spec, out_dir)
    if spec.kind == "docker":
        from .docker import DockerTarget
        return DockerTarget(spec, out_dir)
    if spec.kind == "stack":
        from .stack import StackTarget
        return StackTarget(spec, out_dir)
    if spec.kind == "openai":
        from .openai import OpenAITarget
        return OpenAITarget(spec, out_dir)
    raise TargetError(f"unknown target kind {spec.kind!r}")


__all__ = ["Instance", "Target", "TargetError", "make_target"]
