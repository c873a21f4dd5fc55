"""Latency against input length: per-size percentiles, a straight-line fit, and a knee.

The load sends a list of sizes (load.input_tokens: [1000, 2000, 4000, 8000, 16000]), interleaved through the run,
so each size sees the same machine. Per size: requests sent and answered, P50 and P95 of TTFT (the prefill) and
of E2E. Over the sizes: a least-squares line of the P50 against tokens (slope, intercept, R²) and the log-log
exponent (1: linear, 2: quadratic; a fixed per-request cost pulls it below 1).

The knee rule, on the P50s (the median: one slow request cannot move it). For each size s_j from the third on:
the base is the least-squares line through the P50s of the sizes below it; the step's growth is
P50(s_j) - P50(s_j-1); what the base expects of that step is its slope x (s_j - s_j-1), but at least
MIN_STEP (10 %) of P50(s_j-1), so a base that is flat within noise does not make every rise a knee. The ratio is
growth / expected; the knee is the first size whose ratio exceeds max_knee_ratio. A smooth quadratic with
doubling sizes gives ratios of 2-2.6, a linear one about 1; a break (a chunk or cache limit, preemption,
swapping) gives far more.

Noise: on a busy 2-core machine one P50 can be off by tens of percent. The decision is bootstrapped: per size the
latencies are resampled with replacement (seeded, BOOTSTRAP times) and the rule applied to each resample. A knee
found in at least `confidence` of them fails; a knee in at most 1 - confidence passes; anything between is not
judged: the samples cannot tell a knee from the machine's load. That is how an overloaded machine shows: a steady
neighbour slows every size alike (the sizes are interleaved) and the ratios, being relative, stand; a bursty one
spreads the latencies, and the resamples disagree. Too few requests sent at some size is not judged too (the run
was too short); sent and not answered is the target's failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .spec import GROWTH_METRICS as METRICS, Growth
from ..records import ERROR_OUTCOMES
from ..sizes import size_list
from .checks import Check, fmt_s

MIN_STEP = 0.10  # a step is expected to grow the P50 by at least this fraction (a floor for a flat base)
BOOTSTRAP = 400


@dataclass(slots=True)
class GrowthCheck(Check):
    """A Check that carries its table and fit: report.json shows it as the check's "growth"."""

    growth: dict = field(default_factory=dict)


def _value(r, metric: str) -> float | None:
    end = r.t_first if metric == "ttft" else r.t_end
    return None if end is None else end - r.t_start


def nearest(sizes: list[int], n: int) -> int:
    """The size a request was sent as: its own when exact, else the nearest (an estimating tokenizer rounds)."""
    return min(sizes, key=lambda s: (abs(math.log(max(n, 1) / s)), s))


def group(records, sizes: list[int]) -> dict[int, dict]:
    """Per size: sent (cancelled at the end of the load left out), ok, errors, and the ok latencies."""
    out = {s: {"sent": 0, "ok": 0, "errors": 0, "ttft": [], "e2e": []} for s in sizes}
    for r in records:
        if r.outcome == "cancelled" or not r.input_tokens:
            continue
        g = out[nearest(sizes, r.input_tokens)]
        g["sent"] += 1
        if r.outcome in ERROR_OUTCOMES:
            g["errors"] += 1
        if r.outcome != "ok":
            continue
        g["ok"] += 1
        for m in METRICS:
            v = _value(r, m)
            if v is not None:
                g[m].append(v)
    return out


def fit_line(xs, ys) -> tuple[float, float, float]:
    """Least squares y = slope * x + intercept, and R² (1.0 when every y is equal: a line explains them)."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx * dx).sum())
    intercept = float(y.mean() - slope * x.mean())
    resid = float(((y - (slope * x + intercept)) ** 2).sum())
    total = float(((y - y.mean()) ** 2).sum())
    return float(slope), float(intercept), 1.0 if total == 0 else 1 - resid / total


def exponent(xs, ys) -> float | None:
    """b of y ~ x^b by least squares on logs; None when a latency is not positive."""
    if min(ys) <= 0:
        return None
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def step_ratios(xs, ys) -> list[float]:
    """For each size from the third on: the step's growth over what the line through the smaller sizes expects."""
    out = []
    for j in range(2, len(xs)):
        slope = fit_line(xs[:j], ys[:j])[0]
        expected = max(slope * (xs[j] - xs[j - 1]), MIN_STEP * ys[j - 1], 1e-9)
        out.append((ys[j] - ys[j - 1]) / expected)
    return out


def knee(xs, ys, max_ratio: float) -> int | None:
    """The first size whose step ratio exceeds max_ratio, else None."""
    for j, ratio in enumerate(step_ratios(xs, ys), 2):
        if ratio > max_ratio:
            return xs[j]
    return None


def _p(vals, q) -> float | None:
    return float(np.percentile(vals, q)) if vals else None


def analyse(records, sizes, metric: str = "ttft", max_knee_ratio: float = 3.0, min_requests: int = 8,
            confidence: float = 0.9, seed: int = 0) -> dict:
    """The table, the fits and the decision (passed True/False/None, why), as JSON-ready values (seconds)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    sizes = sorted(set(int(s) for s in sizes))
    groups = group(records, sizes)
    table = [{"input_tokens": s, "sent": g["sent"], "ok": g["ok"], "errors": g["errors"],
              "ttft_p50_s": _p(g["ttft"], 50), "ttft_p95_s": _p(g["ttft"], 95),
              "e2e_p50_s": _p(g["e2e"], 50), "e2e_p95_s": _p(g["e2e"], 95)} for s, g in groups.items()]
    out = {"metric": metric, "max_knee_ratio": max_knee_ratio, "min_requests": min_requests,
           "confidence": confidence, "sizes": table, "fits": {}, "knee_tokens": None, "step_ratios": None,
           "knee_share": None, "passed": None, "why": ""}
    answered = {m: [s for s, g in groups.items() if len(g[m]) >= 2] for m in METRICS}
    for m in METRICS:  # both metrics are fitted for the report, whichever is judged
        xs = answered[m]
        if len(xs) >= 2:
            ys = [float(np.median(groups[s][m])) for s in xs]
            slope, intercept, r2 = fit_line(xs, ys)
            out["fits"][m] = {"slope_ms_per_1k_tokens": slope * 1e6, "intercept_ms": intercept * 1e3, "r2": r2,
                              "exponent": exponent(xs, ys), "sizes": xs}
    if len(sizes) < 3:
        out["why"] = f"a knee needs at least 3 sizes; load.input_tokens gives {len(sizes)}"
        return out
    short = [s for s, g in groups.items() if g["sent"] < min_requests]
    failing = [f"{s} ({g['errors']} of {g['sent']} failed)" for s, g in groups.items() if s in short and g["errors"]]
    if failing:  # few sent because those few failed or hung (a timeout): the target's doing, not the run's
        out["passed"] = False
        out["why"] = f"requests failed at {', '.join(failing)} tokens, and too few were sent to judge the rest"
        return out
    if short:
        out["why"] = (f"too few requests sent at {', '.join(map(str, short))} tokens (fewer than {min_requests}): "
                      f"lengthen load.duration")
        return out
    unanswered = [f"{s} ({len(g[metric])} of {g['sent']})" for s, g in groups.items()
                  if len(g[metric]) < min_requests]
    if unanswered:
        out["passed"] = False
        out["why"] = (f"the target answered too few of the requests sent at {', '.join(unanswered)} tokens "
                      f"(needs {min_requests} at each size)")
        return out
    samples = [np.asarray(groups[s][metric]) for s in sizes]
    ys = [float(np.median(v)) for v in samples]
    out["step_ratios"] = step_ratios(sizes, ys)
    found = knee(sizes, ys, max_knee_ratio)
    out["knee_tokens"] = found
    rng = np.random.default_rng(seed)
    medians = np.stack([np.median(rng.choice(v, (BOOTSTRAP, len(v))), axis=1) for v in samples], axis=1)
    hits = sum(knee(sizes, list(row), max_knee_ratio) is not None for row in medians)
    share = hits / BOOTSTRAP
    out["knee_share"] = share
    worst = max(range(len(out["step_ratios"])), key=out["step_ratios"].__getitem__) + 2
    if share >= confidence:
        at = found or sizes[worst]
        out["passed"], out["knee_tokens"] = False, at
        out["why"] = (f"the step to {at} tokens grows {out['step_ratios'][sizes.index(at) - 2]:.1f}x what the line "
                      f"through the smaller sizes expects (bound {max_knee_ratio:g}x); a knee in {share:.0%} of "
                      f"{BOOTSTRAP} resamples")
    elif share <= 1 - confidence:
        out["passed"], out["knee_tokens"] = True, None
        out["why"] = (f"largest step ratio {out['step_ratios'][worst - 2]:.2f} (at {sizes[worst]} tokens); a knee "
                      f"in {share:.0%} of {BOOTSTRAP} resamples")
    else:
        out["why"] = (f"a knee in {share:.0%} of {BOOTSTRAP} resamples of the latencies: too noisy to tell a knee "
                      f"from the machine's load (was it busy?); run longer or on a quieter machine")
    return out


def sizes_of(load: dict) -> list[int] | None:
    """The sizes of load.input_tokens when it is a list of sizes, else None."""
    return size_list(load.get("input_tokens"))


def growth_check(records, load: dict, spec: Growth | None) -> GrowthCheck:
    """verify: latency_growth (its defaults when spec is None)."""
    p = spec or Growth()
    metric, bound = p.metric, p.max_knee_ratio
    name = f"latency growth with input length ({metric})"
    threshold = f"no knee: no step over {bound:g}x the line through the smaller sizes"
    steps = sizes_of(load)
    if not steps:
        return GrowthCheck(name, None, "-", threshold, "not judged: load.input_tokens is not a list of sizes "
                                                      "(e.g. [1000, 2000, 4000, 8000, 16000])")
    a = analyse(records, steps, metric, bound, p.min_requests, p.confidence,
                seed=int(load.get("seed", 0) or 0))
    fit = a["fits"].get(metric)
    measured = "-" if fit is None else (
        f"{fit['slope_ms_per_1k_tokens']:.1f} ms/1k tokens, R² {fit['r2']:.3f}, knee "
        + (f"at {a['knee_tokens']} tokens" if a["knee_tokens"] else "none"))
    p50s = ", ".join(f"{row['input_tokens']}: {fmt_s(row[f'{metric}_p50_s'])}" for row in a["sizes"])
    detail = f"P50 {p50s}; " + ("" if a["passed"] is not None else "not judged: ") + a["why"]
    return GrowthCheck(name, a["passed"], measured, threshold, detail, growth=a)


def markdown(growth: dict) -> list[str]:
    """The section "Latency vs input length" of report.md."""
    lines = ["## Latency vs input length", "",
             "| input tokens | sent | ok | TTFT P50 | TTFT P95 | E2E P50 | E2E P95 |", "|---|---|---|---|---|---|---|"]
    for row in growth.get("sizes", []):
        lines.append(f"| {row['input_tokens']} | {row['sent']} | {row['ok']} | {fmt_s(row['ttft_p50_s'])} | "
                     f"{fmt_s(row['ttft_p95_s'])} | {fmt_s(row['e2e_p50_s'])} | {fmt_s(row['e2e_p95_s'])} |")
    lines.append("")
    for m, f in growth.get("fits", {}).items():
        exp = "-" if f["exponent"] is None else f"{f['exponent']:.2f}"
        sign = "-" if f["intercept_ms"] < 0 else "+"
        lines.append(f"- {m.upper()} P50 fit: {f['slope_ms_per_1k_tokens']:.1f} ms per 1k tokens {sign} "
                     f"{abs(f['intercept_ms']):.0f} ms, R² {f['r2']:.3f}, log-log exponent {exp}")
    ratios = growth.get("step_ratios")
    if ratios:
        steps = growth["sizes"][2:]
        lines.append(f"- {growth['metric'].upper()} step ratios (growth over the line through the smaller sizes): "
                     + ", ".join(f"{row['input_tokens']}: {r:.2f}" for row, r in zip(steps, ratios)))
    knee_at = growth.get("knee_tokens")
    lines += [f"- knee: {f'at {knee_at} tokens' if knee_at else 'none'} (bound {growth.get('max_knee_ratio'):g}x; "
              f"{growth.get('why')})", ""]
    return lines
