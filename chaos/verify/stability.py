"""Output stability: do the answers stay the same, and whole, through a fault? (docs/stability.md)

Five categories, each a rate with a Wilson interval (chaos.verify.stats.proportion), counts per phase and up to
MAX_EXAMPLES examples. A complete answer is one that came whole (outcome ok, or bad_output: a json workload's
answer that did not parse); failed requests are the error-rate checks' business, not these.

- identical: the stability probes (records with a stability_key, chaos.load.stability) are identical greedy
  requests, so each key has one right answer: its baseline, the most common output_sha among its complete
  answers that ended before the first fault began (with no fault: over the whole run). The rate is the share of
  the probes' complete answers, before, during and after the faults, equal to their key's baseline. A key with no
  baseline answer is counted as unanchored, not compared.
- json_valid: the share of complete answers to requests that asked for JSON (response_format json_object or
  json_schema, or the json workload) that parse.
- truncated: a probe answer cut by max_tokens where a stop was expected, precisely: the request did not fix its
  length (no ignore_eos, not a fixed-length case), its key's baseline ended with finish_reason "stop" having made
  fewer tokens than max_tokens (the model ends this answer by itself), and this answer ended with "length".
  Only probes can show it: for any other request, whether it should have stopped is unknown.
- repetition: the share of complete answers whose closing loop (repeat_ngram, chaos.load.outputs.loop_share)
  takes more than loop_threshold of them. An answer forced past its end (ignore_eos) is left out: a model made to
  go on after EOS may well repeat itself, and that is not the fault's doing.
- garbled: the share of complete answers holding any encoding damage (garbled > 0: U+FFFD, a lone surrogate, a
  control character).

Judgement (verify: stability:, chaos.verify.stabilityspec): identical and json_valid pass at or above their
threshold, the others at or below. A category whose threshold is off is reported, not judged. A category with
nothing to judge (no structured request, no probe that stops by itself) is "not judged" when its threshold was
written, and left out when only defaulted. identical also needs min_repeats compared probe answers during and
after the faults (the whole run without faults): with fewer it is not judged, unless answers already differed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .stabilityspec import LEAST, StabilitySpec
from .checks import Check, not_judged
from .stats import proportion

COMPLETE = ("ok", "bad_output")
MAX_EXAMPLES = 5
DETAIL_HEAD = 48  # characters of a head a check's detail quotes (the report's examples keep all 80)
BEFORE, BETWEEN, AFTER, RUN = "before faults", "between faults", "after faults", "whole run"
# category -> (check name, threshold key, what the rate counts)
CATEGORIES = {
    "identical": ("stability: identical outputs", "identical", "probe answers identical to their key's baseline"),
    "json_valid": ("stability: JSON validity", "json_valid", "answers to requests for JSON that parse"),
    "truncated": ("stability: truncation", "max_truncated", "probe answers cut at max_tokens where their "
                                                            "baseline stopped"),
    "repetition": ("stability: repetition loops", "max_repetition", "answers ending in a loop"),
    "garbled": ("stability: garbled text", "max_garbled", "answers holding encoding damage"),
}


@dataclass(slots=True)
class Window:
    start: float
    end: float
    name: str


def windows_of(phases) -> list[Window]:
    """phases: (start, end) or (start, end, name) per fault, end None while never reverted. Windows that overlap
    are one phase, named for all their faults ("garble-r1 + replace-r0"): a request in both cannot be told apart."""
    given = sorted((Window(p[0], float("inf") if p[1] is None else p[1], p[2] if len(p) > 2 else f"fault {i + 1}")
                    for i, p in enumerate(phases or ())), key=lambda w: w.start)
    out: list[Window] = []
    for w in given:
        if out and w.start <= out[-1].end:
            out[-1].end, out[-1].name = max(out[-1].end, w.end), f"{out[-1].name} + {w.name}"
        else:
            out.append(w)
    return out


def fault_phases(faults, end: float) -> list[tuple[float, float, str]]:
    """(applied_at, reverted_at or end, name) of each applied fault (the runner's Fault objects)."""
    return [(f.applied_at, getattr(f, "reverted_at", None) or end, f.spec.name)
            for f in faults if getattr(f, "applied", False) and getattr(f, "applied_at", None) is not None]


def phase_of(r, ws: list[Window]) -> str:
    """A request's phase: the first fault window it overlapped, else before, between or after the faults."""
    if not ws:
        return RUN
    t_end = r.t_end if r.t_end is not None else r.t_start
    if t_end < ws[0].start:
        return BEFORE
    for w in ws:
        if r.t_start <= w.end and t_end >= w.start:
            return w.name
    return AFTER if r.t_start >= ws[-1].end else BETWEEN  # merged windows: the last ends last


def _complete(r) -> bool:
    return r.outcome in COMPLETE and r.output_sha is not None


def baselines(probes, ws: list[Window]) -> dict:
    """key -> the record of its baseline answer: the most common sha among its complete answers that ended
    before the first fault (ties: the earliest)."""
    first = ws[0].start if ws else None
    counts: dict[str, Counter] = {}
    firsts: dict[tuple, object] = {}
    for r in sorted(probes, key=lambda r: r.t_start):
        if first is not None and (r.t_end is None or r.t_end >= first):
            continue
        counts.setdefault(r.stability_key, Counter())[r.output_sha] += 1
        firsts.setdefault((r.stability_key, r.output_sha), r)
    return {k: firsts[(k, c.most_common(1)[0][0])] for k, c in counts.items()}


def _example(r, phase: str, ws, **extra) -> dict:
    fault = r.fault or (phase if any(w.name == phase for w in ws) else None)
    return {"id": r.id, "key": r.stability_key, "case": r.case, "t": r.t_start, "phase": phase,
            "served_by": r.served_by, "fault": fault, "head": r.output_head, **extra}


def _extras(name: str, r, base: dict) -> dict:
    """What an example of this category shows beyond the request (built for the examples only)."""
    b = base.get(r.stability_key)
    if name == "identical":
        return {"expected_sha": b.output_sha, "got_sha": r.output_sha, "expected_head": b.output_head,
                "got_head": r.output_head}
    if name == "truncated":
        return {"finish_reason": r.finish_reason, "output_tokens": r.output_tokens, "expected_tokens": b.output_tokens}
    return {"repeat_ngram": r.repeat_ngram} if name == "repetition" else \
        {"garbled": r.garbled} if name == "garbled" else {}


def _score(records, spec: StabilitySpec, ws: list[Window]) -> dict:
    """items: category -> [(record, counted, phase)], counted being what the rate counts; base; notes."""
    probes = [r for r in records if r.stability_key is not None and _complete(r)]
    base = baselines(probes, ws)
    stops = {k for k, b in base.items()
             if b.finish_reason == "stop" and (b.requested_tokens is None or b.output_tokens < b.requested_tokens)}
    items = {c: [] for c in CATEGORIES}
    ident, trunc, valid, loops, damage = (items[c] for c in ("identical", "truncated", "json_valid", "repetition",
                                                             "garbled"))
    before: Counter = Counter()
    for r in records:
        if not _complete(r):
            continue
        phase = phase_of(r, ws)
        key = r.stability_key
        if key is not None and key in base:
            ident.append((r, r.output_sha == base[key].output_sha, phase))
            if phase in (BEFORE, RUN):
                before[key] += 1
            if key in stops and not r.fixed_output and not r.ignore_eos:
                trunc.append((r, r.finish_reason == "length", phase))
        if r.json_valid is not None:
            valid.append((r, r.json_valid, phase))
        if r.repeat_ngram is not None and not r.ignore_eos:
            loops.append((r, r.repeat_ngram > spec.loop_threshold, phase))
        if r.garbled is not None:
            damage.append((r, r.garbled > 0, phase))
    sent = sum(1 for r in records if r.stability_key is not None)
    notes = {"sent": sent, "keys": sorted({r.stability_key for r in records if r.stability_key is not None}),
             "complete": len(probes), "not_complete": sent - len(probes),
             "unanchored": sum(1 for r in probes if r.stability_key not in base),
             "baselines": {k: {"sha": b.output_sha, "head": b.output_head, "finish_reason": b.finish_reason,
                               "answers_before": before[k]} for k, b in sorted(base.items())}}
    return {"items": items, "base": base, "notes": notes}


def _pct(v) -> str:
    return f"{v * 100:.2f}%"


def _order(ws: list[Window]) -> list[str]:
    return [BEFORE, *(w.name for w in ws), BETWEEN, AFTER] if ws else [RUN]


def _category(name: str, scored: dict, spec: StabilitySpec, ws: list[Window]) -> tuple:
    """(Check or None, the report's entry) of one category."""
    title, key, what = CATEGORIES[name]
    items, probes_sent = scored["items"][name], scored["notes"]["sent"]
    thr = getattr(spec, key)
    good_is_counted = key in LEAST
    n = len(items)
    counted = sum(1 for _, c, _ in items if c)
    bad = sorted(((r, p) for r, c, p in items if c != good_is_counted), key=lambda b: b[0].t_start)
    bad = [(r, p, _extras(name, r, scored["base"])) if i < MAX_EXAMPLES else (r, p, None) for i, (r, p) in
           enumerate(bad)]
    est = proportion(counted, n)
    phases: dict[str, list[int]] = {p: [0, 0] for p in _order(ws)}
    for _, c, p in items:
        k_n = phases.setdefault(p, [0, 0])
        k_n[0] += bool(c)
        k_n[1] += 1
    phases = {p: km for p, km in phases.items() if km[1]}
    entry = {"check": title, "counts": what, "threshold": thr, "rate": est.to_dict(), "count": counted, "n": n,
             "failures": len(bad),
             "by_phase": {p: {"count": k, "n": m, "rate": proportion(k, m).to_dict()} for p, (k, m) in phases.items()},
             "examples": [_example(r, p, ws, **x) for r, p, x in bad[:MAX_EXAMPLES]]}
    measured = est.fmt(_pct) if n else "none"
    threshold = spec.threshold_text(key)
    if thr is None:
        entry.update(status="off", why="threshold off: reported, not judged")
        return None, entry
    if n == 0:
        why = _nothing_to_judge(name, probes_sent)
        if key not in spec.written and not (name == "identical" and probes_sent):
            entry.update(status="not_applicable", why=why)
            return None, entry
        entry.update(status="not_judged", why=why)
        return not_judged(title, measured, threshold, why), entry
    rate = counted / n
    passed = rate >= thr if good_is_counted else rate <= thr
    detail = f"{what}: {counted} of {n}; " + _phase_text(phases) + _examples_text(name, bad, ws)
    if passed and name == "identical":
        later = sum(m for p, (_, m) in phases.items() if p != BEFORE)
        if later < spec.min_repeats:
            why = (f"only {later} probe answers {'during and after the faults' if ws else 'in the run'} were "
                   f"compared; it needs at least {spec.min_repeats} (min_repeats): raise load.stability.share or "
                   f"the load's duration")
            entry.update(status="not_judged", why=why)
            return not_judged(title, measured, threshold, why), entry
    entry.update(status="passed" if passed else "failed", why=None)
    return Check(title, passed, measured, threshold, detail), entry


def _nothing_to_judge(name: str, probes_sent: int) -> str:
    if name == "identical":
        return ("no probe answer ended before the first fault, so no key has a baseline: start the fault later"
                if probes_sent else "no stability probe was sent: add load.stability")
    return {"json_valid": "no complete answer to a request for JSON (add structured probes or the json workload)",
            "truncated": "no probe's baseline answer stopped before max_tokens, so no stop was expected",
            "repetition": "no complete answer that was free to end (every one had ignore_eos)",
            "garbled": "no complete answer"}[name]


def _phase_text(phases: dict) -> str:
    return "by phase " + ", ".join(f"{p} {k}/{m}" for p, (k, m) in phases.items())


def _examples_text(name: str, bad: list, ws) -> str:
    if not bad:
        return ""
    shown = []
    for r, p, x in bad[:2]:
        where = f"{r.stability_key or r.case} in {p}" + (f" on {r.served_by}" if r.served_by else "")
        if r.fault:
            where += f" [{r.fault}]"
        if name == "identical":
            shown.append(f"{where}: expected {_shown(x['expected_head'])}, got {_shown(x['got_head'])}")
        else:
            shown.append(f"{where}: {_shown(r.output_head)}")
    return "; e.g. " + "; ".join(shown)


def _shown(head) -> str:
    """A head quoted so damage shows: repr escapes control characters and lone surrogates, not U+FFFD."""
    if head is None:
        return "(not kept)"
    return repr(head[:DETAIL_HEAD] + ("..." if len(head) > DETAIL_HEAD else "")).replace("\ufffd", "\\ufffd")


def _evaluate(records, spec, phases) -> tuple[list[Check], dict]:
    spec = StabilitySpec.of(spec)
    ws = windows_of(phases)
    scored = _score(records, spec, ws)
    checks, report = [], {"probes": scored["notes"], "thresholds": spec.to_dict(),
                          "phases": [{"name": w.name, "start": w.start,
                                      "end": None if w.end == float("inf") else w.end} for w in ws]}
    for name in CATEGORIES:
        check, entry = _category(name, scored, spec, ws)
        report[name] = entry
        if check is not None:
            checks.append(check)
    return checks, report


def stability_checks(records, spec, phases) -> tuple[list[Check], dict]:
    """The checks verify: stability: asks for, and report.json's "stability" section. spec: a StabilitySpec, the
    verify: stability: mapping, or None (the defaults); phases: the fault windows, (start, end[, name])."""
    return _evaluate(records, spec, phases)


NOT_ASKED = StabilitySpec(identical=None, json_valid=None, max_truncated=None, max_repetition=None, max_garbled=None)


def stability_report(records, spec=None, phases=()) -> dict | None:
    """report.json's "stability" section (as stability_checks gives it), or None when no record describes its
    output (records from before version 3, or a run whose every request failed). spec None: the experiment did not
    ask (verify: has no stability:), so every rate is reported and none judged (status off)."""
    if not any(r.output_sha is not None or r.stability_key is not None for r in records):
        return None
    return _evaluate(records, NOT_ASKED if spec is None else spec, phases)[1]
