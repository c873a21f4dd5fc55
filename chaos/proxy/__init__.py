"""Proxies that put network and stream faults on a link of a target.

toxiproxy/: a Toxiproxy-compatible TCP proxy and its HTTP API (L4: latency, bandwidth, timeouts, resets ...),
a stand-in for a real toxiproxy-server that Toxiproxy's own clients drive unmodified.
llm/: an HTTP reverse proxy that understands OpenAI-style requests and SSE streams (L7: 429 storms, stalled,
cut or corrupted token streams, altered content).

Neither imports the rest of the toolkit beyond chaos.common and chaos.http1 (the HTTP/1.1 stack the bundled gateway
shares), so either runs standalone (`chaos proxy ...`); tests/test_imports.py and the import contracts hold it.
"""
