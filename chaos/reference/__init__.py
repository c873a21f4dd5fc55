"""The bundled reference inference server.

A compact, nano-vllm-style engine (paged KV cache, continuous batching, prefix
caching, preemption) behind an OpenAI-compatible HTTP API. It is the system under
test for every experiment that does not name a remote vendor.
"""
