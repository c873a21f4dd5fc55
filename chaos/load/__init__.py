"""Load generation with Locust: an LLM streaming user, workloads, load shapes, per-request records.

Only locustfile.py imports locust (it monkey-patches the process with gevent); the rest
is plain Python the runner can import next to asyncio code.
"""
