"""The checks an abnormal_inputs fault brings with it (chaos.faults.inputs): asked of every run that sends one.

Per destination: every case got the answer a good service gives (expected against observed, the failures named);
the gateway passed clients' errors through without retrying them or ejecting healthy replicas; and every
destination served normal requests again after the batch, without a restart.
"""

from __future__ import annotations

from . import checks as V

SHOWN = 5  # failures named in a check's detail; report.json has every case


def _failures(b: dict, n: int = SHOWN) -> str:
    bad = [r for r in b["results"] if not r["pass"]]
    text = "; ".join(f"{r['case']}: {r['problem']}"[:240] for r in bad[:n])
    return text + (f"; and {len(bad) - n} more (report.json, inputs)" if len(bad) > n else "")


def input_checks(faults) -> list[V.Check]:
    out = []
    for f in faults:
        if getattr(f, "family", None) != "input" or not f.applied:
            continue
        r = f.results()
        name = f"abnormal inputs ({f.spec.name})"
        if r["error"]:
            out.append(V.Check(name, False, "not sent", "every case answered as expected",
                               f"the batch could not run: {r['error']}"))
            continue
        if not r["finished"]:
            out.append(V.not_judged(name, f"{sum(b['sent'] for b in r['destinations'].values())} sent",
                                    "every case to every destination", "the load ended before the batch and the "
                                    "check after it were done; lengthen load.duration or send it earlier"))
            continue
        dests = r["destinations"]
        for where, b in dests.items():
            total = b["sent"] + b["not_sent"]
            n = len(b["families"])
            detail = _failures(b) if b["failed"] else f"{n} case famil{'y' if n == 1 else 'ies'}"
            measured = f"{b['passed']} of {total} cases"
            if b["stopped_after"]:
                measured += f"; stopped answering after {b['stopped_after']}"
                detail = f"{b['not_sent']} cases not sent after it stopped answering; " + detail
            if where == "gateway":
                detail += _gateway_mismatch(dests)
            out.append(V.Check(f"{name}: answered as expected by {where}", not b["failed"] and not b["not_sent"],
                               measured, "all", detail))
        if "gateway" in dests:
            out.append(_gateway_check(name, r, f, [g for g in faults if g is not f and g.applied]))
        out.append(_serving_check(name, r))
    return out


def _gateway_mismatch(dests: dict) -> str:
    """Cases a replica answered right and the gateway did not: what the gateway itself did to a client's request."""
    good = {row["case"] for d, b in dests.items() if d != "gateway" for row in b["results"] if row["pass"]}
    changed = [row for row in dests["gateway"]["results"] if not row["pass"] and row["case"] in good]
    if not changed:
        return ""
    shown = ", ".join(f"{row['case']} ({row['expected'][0]} -> {row['observed']})" for row in changed[:SHOWN])
    return f"; the replicas answered {len(changed)} of these right, the gateway changed them: {shown}"


def _gateway_check(name: str, r: dict, fault, others: list) -> V.Check:
    """Client errors passed through once: no case a good service refuses (a 4xx) retried at an upstream (its
    x-gateway-attempts over 1), and no replica that kept serving taken out of rotation while the batch ran."""
    check = f"{name}: the gateway passed client errors through"
    view = r["gateway"] or {}
    broken = {i.id for i in fault.broken()}
    ejected = {k: v for k, v in (view.get("out_of_rotation") or {}).items() if k not in broken}
    rows = r["destinations"]["gateway"]["results"]
    retried = [x for x in rows if (x.get("attempts") or 0) > 1 and all(e < 500 for e in x["expected"])]
    measured = f"{len(retried)} client errors retried" + (
        ", took out " + ", ".join(f"{k} ({v})" for k, v in ejected.items()) if ejected else
        ", no healthy replica taken out")
    want = "no client error retried, no healthy replica ejected"
    if broken:
        return V.not_judged(check, measured, want, f"{', '.join(sorted(broken))} stopped answering, so the gateway "
                                                   f"rightly retried and ejected")
    if ejected and others:
        return V.not_judged(check, measured, want, "other faults ran at the same time; the ejections cannot be "
                                                   "told apart")
    shown = ", ".join(f"{x['case']} ({x['attempts']} attempts, answered {x['observed']})" for x in retried[:SHOWN])
    detail = (f"retried: {shown}; " if retried else "") + (
        "a client's bad input made the gateway take a replica that kept serving out of rotation; " if ejected else
        "") + f"gateway retries counter during the batch: {view.get('retries')}"
    return V.Check(check, not retried and not ejected, measured, want, detail)


def _serving_check(name: str, r: dict) -> V.Check:
    after, restarted = r["serving_after"], r["restarted"]
    bad = []
    for where, s in after.items():
        if s["served"]:
            continue
        b = r["destinations"].get(where) or {}
        cause = f"it stopped answering after case {b['stopped_after']}" if b.get("stopped_after") else \
            f"the first case it failed: {next((x['case'] for x in b.get('results', []) if not x['pass']), 'none')}"
        again = restarted.get(where)
        if again is None:
            fix = "it was not restarted"
        elif again["served"]:
            fix = "it needed a restart: after one it served again"
        else:
            fix = f"it did not serve even after a restart ({again['detail']})"
        short = f"{where} needed a restart" if again and again["served"] else f"{where} not served"
        bad.append((short + (f" (stopped after {b['stopped_after']})" if b.get("stopped_after") else ""),
                    f"{where}: {cause}; no normal request served within {r['serve_within_s']:g}s after "
                    f"the batch ({s['detail']}); {fix}"))
    ok = [f"{w} after {s['after_s']:.1f}s" for w, s in after.items() if s["served"] and s["after_s"] is not None]
    measured = "; ".join(w for w, _ in bad) if bad else ", ".join(ok) or "-"
    return V.Check(f"{name}: normal requests served after the batch, without a restart", not bad, measured,
                   "every destination serves again", " | ".join(text for _, text in bad))
