"""The LLM-aware fault proxy (L7): an HTTP/1.1 reverse proxy in front of an OpenAI-compatible service that answers
with errors, stalls, cuts or corrupts token streams and alters content, per rules set at /__chaos/faults.

    proxy = LLMProxy("http://127.0.0.1:8000", port=9000)
    await proxy.start()
    proxy.add_rule({"name": "storm", "effect": "storm", "params": {"length": 3}})
"""

from .effects import EFFECTS
from .rules import Rule, RuleError
from .server import LLMProxy

__all__ = ["EFFECTS", "LLMProxy", "Rule", "RuleError"]
