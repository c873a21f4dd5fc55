"""The report's section on abnormal inputs: per destination, each family's pass count and every failed case with
its expected and observed answer (report.json keeps every case, passed ones too)."""

from __future__ import annotations

LISTED = 40  # failed cases listed per destination in the Markdown


def inputs_markdown(batches: list[dict]) -> list[str]:
    lines = []
    for b in batches:
        lines += [f"## Abnormal inputs: {b['fault']}", "",
                  f"{b['cases']} cases ({', '.join(b['families'])}) sent to each destination; a good service "
                  f"answers each as `expected` says (docs/abnormal-inputs.md).", ""]
        if b.get("error"):
            lines += [f"The batch could not run: {b['error']}", ""]
            continue
        dests = b["destinations"]
        fams = sorted({f for d in dests.values() for f in d["families"]})
        lines += ["| family | " + " | ".join(dests) + " |", "|---|" + "---|" * len(dests)]
        for fam in fams:
            cells = []
            for d in dests.values():
                c = d["families"].get(fam)
                cells.append("-" if c is None else f"{c['passed']}/{c['cases']}" +
                             ("" if c["passed"] == c["cases"] else " **FAIL**"))
            lines.append(f"| {fam} | " + " | ".join(cells) + " |")
        lines.append("| not sent | " + " | ".join(str(d["not_sent"]) for d in dests.values()) + " |")
        for where, d in dests.items():
            bad = [r for r in d["results"] if not r["pass"]]
            if d.get("stopped_after"):
                lines += ["", f"**{where} stopped answering after case `{d['stopped_after']}`**; "
                              f"{d['not_sent']} cases were not sent to it."]
            if not bad:
                continue
            lines += ["", f"Failed at {where} ({len(bad)}):", "", "| case | expected | observed | problem |",
                      "|---|---|---|---|"]
            for r in bad[:LISTED]:
                want = "/".join(map(str, r["expected"])) + (f" {r['code']}" if r.get("code") else "")
                got = f"{r['observed']}" + (f" {r['observed_code']}" if r.get("observed_code") else "")
                problem = (r["problem"] or "").replace("|", "\\|").replace("\n", " ")[:160]
                lines.append(f"| `{r['case']}` | {want} | {got} | {problem} |")
            if len(bad) > LISTED:
                lines.append(f"| ... and {len(bad) - LISTED} more in report.json | | | |")
        after = b.get("serving_after") or {}
        if after:
            lines += ["", "Normal requests after the batch: " + "; ".join(
                f"{w} {'served after %.1fs' % s['after_s'] if s['served'] and s['after_s'] is not None else 'NOT served: ' + s['detail']}"
                for w, s in after.items())]
        for w, s in (b.get("restarted") or {}).items():
            lines.append(f"- {w} was restarted: " + ("it served again (it **needed a restart**)" if s["served"]
                                                     else f"it still did not serve ({s['detail']})"))
        gw = b.get("gateway") or {}
        if gw:
            lines.append(f"- gateway during the batch: retries {gw.get('retries')}, out of rotation: "
                         f"{', '.join(f'{k} ({v})' for k, v in (gw.get('out_of_rotation') or {}).items()) or 'none'}")
        lines.append("")
    return lines
