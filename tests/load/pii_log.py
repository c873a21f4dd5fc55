"""A replay log full of secrets and personal data, and the check that none of it reached any file."""

import json

from tests.secretscan import files_leaking

# every value a scrubbed replay must keep out of every file; each is one the Scrubber is documented to catch
SECRETS = {
    "authorization": "Bearer tok_9f8e7d6c5b4a39281706",
    "api_key": "sk-proj-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1",
    "email": "alice.smith@example-corp.com",
    "phone": "+44 20 7946 0958",
    "phone_us": "(555) 123-4567",
    "id_card": "11010519491231002X",
    "card": "4111 1111 1111 1111",
    "ipv4": "203.0.113.42",
}
# the forms a value could take in a file: as written, and with its separators gone
NEEDLES = sorted({v for v in SECRETS.values()} | {"4111111111111111", "tok_9f8e7d6c5b4a39281706",
                                                   "Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1", "alice.smith", "7946 0958",
                                                   "123-4567", "203.0.113"})


def write_pii_log(path, n=12, span_s=1.5, t0=1_700_000_000.0) -> int:
    """n envelope lines (chat), each carrying every secret in its headers and text; returns n."""
    with open(path, "w") as f:
        for i in range(n):
            text = (f"request {i}: I am {SECRETS['email']}, call me on {SECRETS['phone']} or "
                    f"{SECRETS['phone_us']}; ID {SECRETS['id_card']}, card {SECRETS['card']}, from "
                    f"{SECRETS['ipv4']}, my key is {SECRETS['api_key']}")
            f.write(json.dumps({
                "timestamp": t0 + span_s * i / n,
                "request": {"url": "/v1/chat/completions",
                            "headers": {"Authorization": SECRETS["authorization"], "x-api-key": SECRETS["api_key"]},
                            "body": {"model": "prod-model", "max_tokens": 3, "user": SECRETS["email"],
                                     "messages": [{"role": "user", "content": text}]}},
                "response": {"status": 200}}) + "\n")
    return n


def leaks(folder) -> list[str]:
    """Every secret value found in any file under folder (bytes, every file, binary too), as written or in any
    common encoding (tests/secretscan.py)."""
    return files_leaking(folder, *NEEDLES)
