"""An engine's own expectation table: what it answered to each hostile and abnormal case, recorded from a real
run, so a later run of the same engine is judged against the engine itself (an upgrade that changes an answer is
named), not against the bundled server's idea of a good answer.

A recorded answer is not a blessing: a 5xx or no answer is kept in the table as what the engine did, and is still
counted as a finding every time it happens (`chaos selftest hostile` never lets a table turn a 5xx into an
expectation). A difference from the bundled server's expectation that is a defensible choice (a temperature above
2 clamped rather than refused) is visible in the table as `differs` and in docs/engines.md, case by case.

    chaos selftest hostile --url http://127.0.0.1:PORT --abnormal --record targets/engines/expectations/X.json
    chaos selftest hostile --url http://127.0.0.1:PORT --abnormal --expect targets/engines/expectations/X.json
"""

from __future__ import annotations

import json
import os
import time

TABLE_VERSION = 1


def observed(status: int | None, body) -> dict:
    err = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else {}
    return {"status": status, "param": err.get("param"), "code": err.get("code")}


def verdict(case, obs: dict, problem: str | None) -> str:
    """as-expected | differs (a 2xx-4xx other than the bundled server's good answer) | 5xx | no-answer."""
    if obs["status"] is None:
        return "no-answer"
    if obs["status"] >= 500:
        return "5xx"
    return "as-expected" if obs["status"] in case.expect and problem is None else "differs"


def family(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else "hostile"


def write_table(path: str, rows: list[dict], meta: dict) -> None:
    doc = {"version": TABLE_VERSION, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **meta,
           "summary": summarize(rows), "cases": {r["case"]: {k: r[k] for k in ("status", "param", "code", "verdict")}
                                                  for r in rows}}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def read_table(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read the expectation table {path}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"{path} is not an expectation table (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("version") != TABLE_VERSION or not isinstance(doc.get("cases"), dict):
        raise ValueError(f"{path} is not an expectation table of version {TABLE_VERSION}; record it again with "
                         f"--record")
    return doc


def differs_from(record: dict | None, obs: dict) -> str | None:
    """How this answer differs from the engine's recorded one, or None."""
    if record is None:
        return "not in the table (a case added since it was recorded)"
    diffs = [f"{k} {obs[k]!r}, recorded {record.get(k)!r}" for k in ("status", "param", "code")
             if obs[k] != record.get(k)]
    return "; ".join(diffs) or None


def summarize(rows: list[dict]) -> dict:
    """family -> counts of each verdict."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        fam = out.setdefault(family(r["case"]), {"cases": 0, "as-expected": 0, "differs": 0, "5xx": 0,
                                                 "no-answer": 0})
        fam["cases"] += 1
        fam[r["verdict"]] += 1
    return dict(sorted(out.items()))
