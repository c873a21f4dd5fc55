"""Effects on the generated text: the whole message of a plain answer, or each delta of a stream."""

from __future__ import annotations

import math
import string

from .base import Effect, Params, Run


class ContentEffect(Effect):
    kind = "content"

    def text(self, run: Run, s: str, streamed: bool) -> str:
        return s

    def args(self, run: Run, s: str, streamed: bool) -> str:
        """Tool-call arguments; only break_json touches them."""
        return s


def apply_content(runs: list[Run], obj, streamed: bool) -> bool:
    """Rewrite the text of a chat.completion(.chunk) or text_completion object in place; True if changed."""
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        return False
    changed = False
    for ch in obj["choices"]:
        if not isinstance(ch, dict):
            continue
        holder = ch.get("delta" if streamed and "delta" in ch else "message")
        targets = []
        if isinstance(holder, dict) and isinstance(holder.get("content"), str) and holder["content"]:
            targets.append((holder, "content", "text"))
        elif isinstance(ch.get("text"), str) and ch["text"]:
            targets.append((ch, "text", "text"))
        if isinstance(holder, dict) and isinstance(holder.get("tool_calls"), list):
            for tc in holder["tool_calls"]:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str) and fn["arguments"]:
                    targets.append((fn, "arguments", "args"))
        for where, key, how in targets:
            for run in runs:
                if run.active:
                    new = getattr(run.effect, how)(run, where[key], streamed)
                    if new != where[key]:
                        where[key], changed = new, True
    return changed


class ReplaceText(ContentEffect):
    name = "replace_text"
    help = "replace the answer's text with text (a stream: the first delta carries it, later ones are emptied)"

    def configure(self, p: Params) -> None:
        self.replacement = p.str_("text", "[replaced by llm-chaos]")

    def text(self, run, s, streamed):
        first = not run.state.get("done")
        run.state["done"] = True
        run.detail = "replaced the text"
        return self.replacement if first else ""


class Garble(ContentEffect):
    name = "garble"
    help = "scramble letters and digits, keeping length, case, whitespace and punctuation"

    def text(self, run, s, streamed):
        rng = run.rule.rng
        out = []
        for c in s:
            if c in string.ascii_lowercase:
                c = rng.choice(string.ascii_lowercase)
            elif c in string.ascii_uppercase:
                c = rng.choice(string.ascii_uppercase)
            elif c in string.digits:
                c = rng.choice(string.digits)
            elif c.isalpha():
                c = rng.choice(string.ascii_letters)
            out.append(c)
        run.detail = "garbled the text"
        return "".join(out)


class Enlarge(ContentEffect):
    name = "enlarge"
    help = "make the text factor (2) times as long, by repeating it"

    def configure(self, p: Params) -> None:
        self.factor = p.num("factor", 2, 1, 1000)

    def text(self, run, s, streamed):
        run.detail = f"enlarged the text x{self.factor:g}"
        return (s * math.ceil(self.factor))[: round(len(s) * self.factor)]


class BreakJson(ContentEffect):
    name = "break_json"
    help = "make a structured answer's JSON (content or tool-call arguments) invalid: a comma after its first bracket"

    def _break(self, run, s, streamed, what):
        if run.state.get(what):
            return s
        i = min((j for j in (s.find("{"), s.find("[")) if j >= 0), default=-1)
        if i < 0:
            if streamed:
                return s  # no bracket in this piece: wait for the one that has it
            run.state[what] = True
            run.detail = f"broke the {what} (prefixed a brace)"
            return "{" + s
        run.state[what] = True
        run.detail = f"broke the JSON {what}"
        return s[: i + 1] + "," + s[i + 1:]

    def text(self, run, s, streamed):
        return self._break(run, s, streamed, "content")

    def args(self, run, s, streamed):
        return self._break(run, s, streamed, "arguments")


CONTENT_EFFECTS = (ReplaceText, Garble, Enlarge, BreakJson)
