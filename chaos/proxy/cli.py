"""`chaos proxy`: run a fault proxy standalone."""

from __future__ import annotations

from chaos.common import command_group


def register(sub, formatter) -> None:
    kinds = command_group(
        sub, "proxy", "proxy_kind", "KIND", formatter_class=formatter,
        help="run a fault proxy standalone (Toxiproxy-compatible, or LLM-aware)",
        description="Run one of the bundled fault proxies by itself, in front of any service.\n\n"
                    "  serve  a Toxiproxy-compatible server: its HTTP API on --port (8474 by default); Toxiproxy's\n"
                    "         own clients (toxiproxy-python, toxiproxy-go, toxiproxy-cli ...) drive it unmodified\n"
                    "  llm    an HTTP reverse proxy that understands OpenAI-style requests and SSE streams and\n"
                    "         injects LLM faults (429 storms, stalled or cut streams, corrupted chunks ...)",
        epilog="examples:\n"
               "  chaos proxy serve --port 8474\n"
               "  chaos proxy llm --listen 127.0.0.1:9000 --upstream http://127.0.0.1:8000\n"
               "\nRun `chaos proxy KIND --help` for the options of each.")
    from .llm.cli import register as register_llm
    from .toxiproxy.cli import register as register_toxiproxy

    register_toxiproxy(kinds, formatter)
    register_llm(kinds, formatter)
