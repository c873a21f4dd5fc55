"""What the schemathesis modules share (tests/reference/test_schemathesis.py, tests/reference/gateway/
test_schemathesis.py, tests/proxy/llm/test_schemathesis.py): the budget, loading a served document, and the count
of cases each operation got.

The budget is fixed and derandomized, so CI's cost is bounded and a failure reproduces: EXAMPLES generated cases
per operation in the fuzzing phase, plus the cases the examples and coverage phases derive from the document itself
(each boundary, each type, each undeclared method). No deadline: a busy two-core machine is slow, and no timing is
judged here. CHAOS_SCHEMA_EXAMPLES=1000 raises the budget for a long run.

Every check schemathesis enables by default runs on every response: not_a_server_error (no 5xx),
status_code_conformance, content_type_conformance, response_headers_conformance and response_schema_conformance
(each response, SSE events included, is one the document declares), positive_data_acceptance,
negative_data_rejection, missing_required_header, ignored_auth, unsupported_method (405 with Allow) and the rest.
"""

from __future__ import annotations

import os
from collections import Counter

import hypothesis
import schemathesis
from schemathesis.checks import CHECKS, load_all_checks

from chaos.common import FAULT_TOKEN_HEADER

load_all_checks()

EXAMPLES = int(os.environ.get("CHAOS_SCHEMA_EXAMPLES") or 25)

# too_slow is Hypothesis's judgement of generation time, which a loaded two-core machine fails at random.
SETTINGS = hypothesis.settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                               suppress_health_check=[hypothesis.HealthCheck.too_slow])


class Tally:
    """Cases sent, per operation, and the operations schemathesis selected from the document (all but the
    document's own GET)."""

    def __init__(self, name: str):
        self.name, self.cases, self.operations = name, Counter(), []
        self.accepted = Counter()  # 2xx answers, per operation

    def load(self, url: str, headers: dict | None = None) -> schemathesis.BaseSchema:
        """The document served at url, with headers sent on every generated request (a fault token)."""
        config = schemathesis.Config.from_dict({
            "seed": 0,
            "headers": headers or {},
            "request-timeout": 60,  # a bound, not a judgement: a hung request fails the run instead of stalling it
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
            # Reproductions print max_tokens; only the fault token's header is secret.
            "output": {"sanitization": {"keys-to-sanitize": [FAULT_TOKEN_HEADER], "sensitive-markers": ["fault"]}},
        })
        schema = schemathesis.openapi.from_url(url, config=config, timeout=30)
        self.operations = sorted(op.ok().label for op in schema.get_all_operations())
        return schema

    def call_and_validate(self, case: schemathesis.Case, tolerate=None) -> schemathesis.Response:
        """case.call_and_validate(), counted. tolerate(response) True: positive_data_acceptance is not judged on
        this response (see context_refusal); every other check still is."""
        self.cases[case.operation.label] += 1
        response = case.call()
        self.accepted[case.operation.label] += 200 <= response.status_code < 300
        excluded = CHECKS.get_by_names(["positive_data_acceptance"]) if tolerate and tolerate(response) else []
        case.validate_response(response, excluded_checks=excluded)
        return response

    def report(self, reached: tuple[str, ...] = ()) -> str:
        """One line for the log; asserts that every operation was tested, and that each operation in reached
        accepted some cases (2xx: the generated requests got past validation, to the engine)."""
        line = (f"schemathesis: {self.name} got {sum(self.cases.values())} cases over {len(self.cases)} operations "
                f"(CHAOS_SCHEMA_EXAMPLES={EXAMPLES}): "
                + ", ".join(f"{op} {n} ({self.accepted[op]} 2xx)" for op, n in sorted(self.cases.items())))
        print(line)
        assert self.operations and set(self.cases) == set(self.operations), f"untested operations: {line}"
        assert all(self.accepted[op] for op in reached), f"no case accepted: {line}"
        return line


def context_refusal(response) -> bool:
    """A 400 context_length_exceeded: the prompt's tokens plus max_tokens over the context. That bound spans two
    fields and the tokenizer, which JSON Schema cannot state (the document says it in max_tokens' description),
    so a schema-valid request may meet it; the only refusal positive_data_acceptance is not held to."""
    if response.status_code != 400:
        return False
    try:
        return response.json()["error"]["code"] == "context_length_exceeded"
    except (ValueError, KeyError, TypeError):
        return False


def tracebacks(lines: list[str]) -> list[str]:
    """Lines of a server's output that start a Python traceback (an exception the server logged)."""
    return [line for line in lines if "Traceback (most recent call last)" in line]
