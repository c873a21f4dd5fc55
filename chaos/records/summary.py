"""The seed's table: per step, latency percentiles (never the mean), errors by class, throughput.

TPOT and ITL as GuideLLM and vLLM's benchmark define them (docs/load.md): TPOT is per request,
(E2E - TTFT) / (output tokens - 1), then percentiles over requests; ITL is every gap between
consecutive content chunks, pooled across requests, then percentiles over gaps.
"""

from __future__ import annotations

import numpy as np

from . import colsummary
from .labels import rule_and_effect, split_labels
from .record import ERROR_OUTCOMES, RequestRecord
from .stepsummary import StepSummary, lag_and_error_rate, triple

__all__ = ["StepSummary", "format_table", "summarize", "summarize_steps"]

def _pool(parts: list) -> np.ndarray:
    """Every request's gaps in one array: records read back hold array('I') (views, no copy); lists also work."""
    if not parts:
        return np.empty(0, dtype=np.uint32)
    return np.concatenate([np.asarray(p) for p in parts])


def summarize(records: list[RequestRecord], step: str, open_loop: bool = False,
              duration_s: float | None = None) -> StepSummary:
    s = StepSummary(step=step, open_loop=open_loop)
    s.requests = len(records)
    if not records:
        return s
    ttft, tpot, e2e, gaps = [], [], [], []
    sources = set()
    for r in records:
        sources.add(r.input_tokens_source)
        _count_faults(s, r)
        if r.outcome == "cancelled":
            s.cancelled += 1
            continue
        if r.outcome in ERROR_OUTCOMES:
            s.errors[r.outcome] = s.errors.get(r.outcome, 0) + 1
            continue
        s.ok += 1
        s.input_tokens += r.input_tokens
        s.output_tokens += r.output_tokens
        s.ended_early += r.ended_early
        s.fixed_output += r.fixed_output
        # an estimate is expected to differ from the server's count; only an exact count that differs is news
        if (r.input_tokens_source == "exact" and r.server_input_tokens is not None
                and r.server_input_tokens != r.input_tokens):
            s.input_mismatch += 1
        if len(r.itl_us):
            gaps.append(r.itl_us)
        s.itl_gaps_dropped += r.itl_dropped
        base = r.t_sched if open_loop else r.t_start  # open loop: count the generator's own delay
        if r.t_first is not None:
            ttft.append(r.t_first - base)
            if r.output_tokens > 1 and r.t_end is not None:
                tpot.append((r.t_end - r.t_first) / (r.output_tokens - 1))
        if r.t_end is not None:
            e2e.append(r.t_end - base)
    lag_and_error_rate(s, np.fromiter((r.t_start - r.t_sched for r in records), dtype=float, count=len(records)))
    s.ttft, s.tpot, s.e2e = triple(ttft), triple(tpot), triple(e2e)
    pooled = _pool(gaps)
    s.itl_gaps = len(pooled)
    s.itl = triple(pooled, 1e6, scratch=True)  # records keep microseconds
    del pooled
    if s.e2e["p50"]:
        s.jitter = s.e2e["p99"] / s.e2e["p50"]
    if duration_s is None:
        duration_s = max(r.t_end or r.t_start for r in records) - min(r.t_sched for r in records)
    s.duration_s = max(duration_s, 1e-9)
    s.rps = s.ok / s.duration_s
    s.output_tps = s.output_tokens / s.duration_s
    s.token_counts = sources.pop() if len(sources) == 1 else "mixed"
    return s


def _count_faults(s: StepSummary, r: RequestRecord) -> None:
    for label in dict.fromkeys(rule_and_effect(x) for x in split_labels(r.fault)):
        f = s.faults.setdefault(label, {"requests": 0, "ok": 0, "cancelled": 0, "errors": {}})
        f["requests"] += 1
        if r.outcome in ERROR_OUTCOMES:
            f["errors"][r.outcome] = f["errors"].get(r.outcome, 0) + 1
        elif r.outcome in ("ok", "cancelled"):
            f[r.outcome] += 1
    causes = r.retry_causes
    if r.retries and not causes:  # a file from before retry_causes: statuses only, transport failures unknown
        causes = [str(x) for x in r.retry_statuses] + ["unknown"] * max(0, r.retries - len(r.retry_statuses))
    for c in causes:
        s.retry_causes[c] = s.retry_causes.get(c, 0) + 1


def summarize_steps(records: list[RequestRecord], step_order: list[str], open_loop: bool = False,
                    durations: dict | None = None) -> list[StepSummary]:
    """One StepSummary a step; records: a list, or chaos.records.columns.Columns (the same table, streaming)."""
    if isinstance(records, colsummary.Columns):
        return colsummary.summarize_steps(records, step_order, open_loop, durations)
    by_step: dict[str, list[RequestRecord]] = {}
    for r in records:
        by_step.setdefault(r.step or "all", []).append(r)
    names = [n for n in step_order if n in by_step] + [n for n in by_step if n not in step_order]
    return [summarize(by_step[n], n, open_loop, (durations or {}).get(n)) for n in names]


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def format_table(summaries: list[StepSummary]) -> str:
    head = (f"{'step':<16}{'reqs':>6}{'ok':>6}{'err%':>7}  {'TTFT p50/p95/p99 ms':>21}  "
            f"{'TPOT p50/p95/p99 ms':>20}  {'ITL p50/p95/p99 ms':>20}  {'E2E p50/p95/p99 ms':>21}"
            f"{'P99/P50':>8}{'req/s':>7}{'tok/s':>8}")
    lines = [head, "-" * len(head)]
    for s in summaries:
        tri = lambda d: "/".join(_ms(d.get(k)) for k in ("p50", "p95", "p99"))  # noqa: E731
        jitter = "-" if s.jitter is None else f"{s.jitter:.1f}"
        lines.append(f"{s.step:<16}{s.requests:>6}{s.ok:>6}{s.error_rate * 100:>6.2f}%  {tri(s.ttft):>21}  "
                     f"{tri(s.tpot):>20}  {tri(s.itl):>20}  {tri(s.e2e):>21}{jitter:>8}{s.rps:>7.1f}"
                     f"{s.output_tps:>8.0f}")
        notes = []
        if s.errors:
            notes.append("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())))
        if s.cancelled:
            notes.append(f"cancelled at the end: {s.cancelled}")
        if s.open_loop and s.late_requests:
            notes.append(f"generator fell behind: {s.late_requests} requests sent >10 ms late "
                         f"(worst {s.max_lag_s * 1000:.0f} ms); latency counts from the intended time")
        if s.token_counts != "exact":
            notes.append(f"token counts: {s.token_counts}")
        if s.ended_early:
            notes.append(f"ended early: {s.ended_early} of {s.fixed_output} fixed-length ok requests stopped "
                         f"(finish_reason stop) before their max_tokens")
        if s.input_mismatch:
            notes.append(f"input tokens: the server counted a different prompt size than the workload in "
                         f"{s.input_mismatch} requests")
        for label, f in sorted(s.faults.items()):
            parts = [f"ok {f['ok']}"] + [f"{k} {v}" for k, v in sorted(f["errors"].items())]
            if f["cancelled"]:
                parts.append(f"cancelled {f['cancelled']}")
            notes.append(f"fault {label}: {f['requests']} requests ({', '.join(parts)})")
        if s.retry_causes:
            notes.append("retries by cause: " + ", ".join(f"{k} {v}" for k, v in sorted(s.retry_causes.items())))
        if s.itl_gaps_dropped:
            notes.append(f"ITL pools {s.itl_gaps} gaps; {s.itl_gaps_dropped} more of very long outputs were "
                         f"not kept")
        for n in notes:
            lines.append(f"{'':<16}  {n}")
    return "\n".join(lines)
