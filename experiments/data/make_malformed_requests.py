"""Writes malformed-requests.jsonl: a synthetic but realistic production request log for
experiments/malformed-replay.yaml. Deterministic: `python experiments/data/make_malformed_requests.py` rewrites
the same file.

What is in it (every value made up; the e-mails, phones, ID-card and card numbers, IPs and keys are fakes the replay's scrubbing
must remove before anything is sent or stored):
- ~250 ordinary support-chat and completion requests, mostly as the gateway logged them
  ({"timestamp", "request": {"url", "headers", "body"}, "response": {...}}), some as bare OpenAI bodies, arriving
  in bursts with lulls over ~60 s of log;
- abnormal but valid requests a good server answers with a 400 (each tagged "case": "bad-..."): empty messages,
  every message empty, a prompt over the context, max_tokens past the context, 0, negative or a string,
  temperature 5, top_p 0, n 3, an unknown role, content a number, an empty completions prompt;
- lines that cannot be replayed at all (each tagged "case": "broken-..." where it still parses, or simply
  broken): truncated JSON, a JSON array, a number, a string, a request without prompt or messages, a body that
  is a non-JSON string, a timestamp that is not a time.
"""

from __future__ import annotations

import json
import os
import random

T0 = 1_733_212_800.0  # 2024-12-03 08:00:00 UTC
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "malformed-requests.jsonl")

QUESTIONS = [
    "Where is my order? It was due on Monday.", "How do I reset my password?", "Can I change the delivery address?",
    "What is your refund policy for opened items?", "The app crashes when I open the basket.",
    "Do you ship to Norway?", "My discount code does not work at checkout.", "How long does a refund take?",
    "I was charged twice for the same order.", "Can I speak to a human, please?", "Is the blue jacket back in stock?",
    "How do I cancel my subscription?", "The invoice shows the wrong company name.", "Why was my account locked?",
]
PII = [  # fake personal data a production log carries in free text
    "my e-mail is jane.doe{n}@example.com", "call me on +44 20 7946 09{n:02d}", "my number is (555) 201-{n:04d}",
    "card 4111 1111 1111 1111 was charged", "I logged in from 198.51.100.{n}", "reach me at m.rossi{n}@example.org",
    "my ID card is 11010519491231002X", "our integration key is sk-test-{n:02d}Qw8Er7Ty6Ui5Op4As3",
]
SYSTEM = "You are the support assistant of an online shop. Answer briefly."
FILLER = ("latency throughput replica gateway cache block token stream request server model batch queue timeout "
          "retry fallback prefix decode prefill memory ").split()

# abnormal but valid: case -> a body the reference server (and vLLM / OpenAI) must answer with a 400
BAD = {
    "bad-empty-messages": {"messages": [], "max_tokens": 16},
    "bad-all-empty": {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
                      "max_tokens": 16},
    "bad-over-context": None,  # made below: a prompt over every preset's context
    "bad-max-tokens-past-context": {"messages": [{"role": "user", "content": "Summarise our policy."}],
                                    "max_tokens": 9000},
    "bad-max-tokens-zero": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 0},
    "bad-max-tokens-negative": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": -5},
    "bad-max-tokens-string": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": "ten"},
    "bad-temperature": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 5},
    "bad-top-p": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "top_p": 0},
    "bad-n": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "n": 3},
    "bad-role": {"messages": [{"role": "wizard", "content": "Hello"}], "max_tokens": 8},
    "bad-content-type": {"messages": [{"role": "user", "content": 42}], "max_tokens": 8},
    "bad-empty-prompt": {"prompt": "", "max_tokens": 8},
}
BAD_CODES = {"bad-empty-messages": "empty_array", "bad-all-empty": "empty_input",
             "bad-over-context": "context_length_exceeded", "bad-max-tokens-past-context": "integer_above_max_value",
             "bad-max-tokens-zero": "integer_below_min_value", "bad-max-tokens-negative": "integer_below_min_value",
             "bad-max-tokens-string": "invalid_type", "bad-temperature": "decimal_above_max_value", "bad-top-p": "decimal_below_min_value",
             "bad-n": "unsupported_value", "bad-role": "invalid_value", "bad-content-type": "invalid_type",
             "bad-empty-prompt": "empty_input"}


def _times(rng: random.Random, n: int) -> list[float]:
    """n arrival offsets over ~60 s: bursts of 10-30 requests within 0.5 s after lulls of 1-5 s, as production."""
    out, t = [], 0.0
    while len(out) < n:
        burst = rng.randint(10, 30)
        out += [t + rng.uniform(0, 0.5) for _ in range(burst)]
        t += 0.5 + rng.uniform(1.0, 5.0)
    return sorted(out[:n])


def _headers(rng: random.Random, i: int) -> dict:
    h = {"content-type": "application/json", "x-request-id": f"req-{i:05d}"}
    if rng.random() < 0.7:
        h["Authorization"] = f"Bearer sk-live-{rng.getrandbits(96):024x}"
    else:
        h["api-key"] = f"sk-proj-{rng.getrandbits(96):024x}"
    return h


def _normal(rng: random.Random, i: int) -> tuple[dict, str]:
    q = rng.choice(QUESTIONS)
    if rng.random() < 0.2:
        q += " " + rng.choice(PII).format(n=rng.randint(1, 99))
    if rng.random() < 0.15:
        return {"prompt": f"Customer: {q}\nAgent:", "max_tokens": rng.randint(8, 24), "temperature": 0.7}, "/v1/completions"
    return {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
            "max_tokens": rng.randint(8, 24), "temperature": 0.7}, "/v1/chat/completions"


def _envelope(ts: float, url: str, headers: dict, body: dict, status: int, code: str | None = None,
              case: str | None = None) -> dict:
    resp = {"status": status}
    if code:
        resp["body"] = {"error": {"code": code, "type": "invalid_request_error"}}
    else:
        resp["body"] = {"usage": {"completion_tokens": body.get("max_tokens")}}
    e = {"timestamp": round(ts, 3), "request": {"url": url, "headers": headers, "body": {"model": "shop-assistant",
                                                                                        **body}},
         "response": resp}
    if case:
        e["case"] = case
    return e


def broken_lines(ts: float) -> list[tuple[str, str]]:
    """(raw line, why it cannot be replayed)."""
    trunc = json.dumps(_envelope(ts, "/v1/chat/completions", {}, {"messages": [{"role": "user",
                                                                                  "content": "Where is my parcel"}]},
                                 200))
    return [
        (trunc[: len(trunc) // 2], "truncated JSON (the logger was killed mid-write)"),
        (json.dumps([{"role": "user", "content": "hi"}]), "a JSON array, not an object"),
        ("42", "a number"),
        (json.dumps("POST /v1/chat/completions"), "a string"),
        (json.dumps({"timestamp": ts, "request": {"url": "/v1/chat/completions", "body": {"model": "shop-assistant",
                                                                                           "max_tokens": 8}},
                     "response": {"status": 400}, "case": "broken-no-messages"}), "no prompt nor messages"),
        (json.dumps({"timestamp": ts, "model": "shop-assistant", "temperature": 0.2, "case": "broken-bare-no-prompt"}),
         "an OpenAI body without prompt or messages"),
        (json.dumps({"timestamp": ts, "request": {"url": "/v1/chat/completions", "body": "{\"messages\": [{\"ro"},
                     "response": {"status": 200}, "case": "broken-body-string"}), "a body string that is not JSON"),
        (json.dumps({"timestamp": "yesterday", "messages": [{"role": "user", "content": "hi"}],
                     "case": "broken-timestamp"}), "a timestamp that is not a time"),
        ('{"timestamp": ' + str(round(ts, 3)) + ', "messages": [{"role": "user", "content": "unterminated}',
         "truncated JSON"),
        ("{", "a lone brace"),
    ]


def build(seed: int = 21, normal: int = 250) -> list[str]:
    rng = random.Random(seed)
    kinds = ["normal"] * normal + [c for c in BAD for _ in range(2)] + ["broken"] * 10
    rng.shuffle(kinds)
    times = _times(rng, len(kinds))
    rng_text = random.Random(seed + 1)
    over = " ".join(rng_text.choice(FILLER) for _ in range(1500))  # ~10k bytes: over an 8k context and a 1k one
    broken = iter(broken_lines(0.0))
    lines = []
    for i, (kind, off) in enumerate(zip(kinds, times)):
        ts = T0 + off
        headers = _headers(rng, i)
        if kind == "normal":
            body, url = _normal(rng, i)
            if rng.random() < 0.2:  # some lines are bare OpenAI bodies (another service's logger)
                lines.append(json.dumps({"timestamp": round(ts, 3), "model": "shop-assistant", **body}))
            else:
                lines.append(json.dumps(_envelope(ts, url, headers, body, 200)))
        elif kind == "broken":
            raw, _ = next(broken)
            lines.append(raw.replace('"timestamp": 0.0', f'"timestamp": {round(ts, 3)}'))
        else:
            body = BAD[kind] or {"messages": [{"role": "user", "content": f"Summarise this log: {over}"}],
                                 "max_tokens": 16}
            url = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
            lines.append(json.dumps(_envelope(ts, url, headers, body, 400, BAD_CODES[kind], kind)))
    return lines


if __name__ == "__main__":
    rows = build()
    with open(OUT, "w") as f:
        f.write("\n".join(rows) + "\n")
    print(f"wrote {len(rows)} lines to {OUT}")
