"""`chaos reference demo`: a two-minute tour of the reference server, with the real openai client."""

from __future__ import annotations

import asyncio
import time

from .launcher import start_server


async def _one(client, i: int, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    ttft, n, served = None, 0, None
    stream = await client.chat.completions.create(
        model="chaos-reference", messages=[{"role": "user", "content": f"Request {i}: tell me a story."}],
        max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.usage:
            n = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content and ttft is None:
            ttft = time.perf_counter() - t0
        served = chunk.system_fingerprint or served
    return {"i": i, "ttft": ttft or 0.0, "e2e": time.perf_counter() - t0, "tokens": n, "served_by": served}


async def _drive(base_url: str, requests: int, max_tokens: int) -> list[dict]:
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0) as client:
        return await asyncio.gather(*(_one(client, i, max_tokens) for i in range(requests)))


def run_demo(preset: str, requests: int, max_tokens: int) -> int:
    print(f"starting a reference server (preset {preset}) on a free loopback port ...", flush=True)
    with start_server(["--preset", preset, "--replica-id", "demo-r0"]) as server:
        print(server.output[-1], flush=True)
        t0 = time.perf_counter()
        results = asyncio.run(_drive(server.base_url, requests, max_tokens))
        wall = time.perf_counter() - t0
        print(f"\n{'req':>4} {'TTFT ms':>9} {'E2E ms':>9} {'tokens':>7}  served by")
        for r in results:
            print(f"{r['i']:>4} {r['ttft'] * 1000:>9.1f} {r['e2e'] * 1000:>9.1f} {r['tokens']:>7}  {r['served_by']}")
        total = sum(r["tokens"] for r in results)
        print(f"\n{requests} concurrent streams, {total} output tokens in {wall:.2f}s = {total / wall:.0f} tok/s")
        import urllib.request

        metrics = urllib.request.urlopen(server.base_url + "/metrics").read().decode()
        for line in metrics.splitlines():
            if line.startswith(("vllm:generation_tokens_total", "vllm:prefix_cache", "vllm:num_preemptions_total")):
                print("  " + line)
        code = server.stop()
        print(f"server drained and exited with {code}")
    return 0 if all(r["tokens"] == max_tokens for r in results) and code == 0 else 1
