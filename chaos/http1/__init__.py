"""Just enough HTTP/1.1 for the toolkit's own servers and proxies, on asyncio streams.

wire.py: heads, bodies by Content-Length / chunked / close, chunks; pool.py: an upstream and its kept-alive
connections; server.py: the listening side (a task a connection, deadlines, error answers); pump.py: a body relayed
from the transport's reads. The bundled gateway (chaos.reference.gateway) and the LLM fault proxy (chaos.proxy.llm)
share it; it imports nothing of the toolkit beyond chaos.common and chaos.errors (its errors are ServiceErrors), so
the bundled server still lifts out with it.
"""
