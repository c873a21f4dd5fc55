"""Replay of production request logs and public traces: readers, prompt synthesis, scrubbing, filters.

Standalone: imports nothing else of the toolkit.
"""

from .mapping import LogMapping
from .model import Item, Problem
from .readers import FORMATS, MAX_LINE_BYTES, detect_format, iter_log, read_lines
from .readers import blank as blank_line
from .scrub import KINDS as SCRUB_KINDS
from .scrub import Scrubber
from .filters import ReplayFilter, item_tokens, select
from .synth import BLOCK_TOKENS, PromptSynth, count_body, count_chat, count_prompt

__all__ = ["BLOCK_TOKENS", "FORMATS", "MAX_LINE_BYTES", "SCRUB_KINDS", "Item", "LogMapping", "Problem", "PromptSynth",
           "ReplayFilter", "Scrubber", "blank_line", "count_body", "count_chat", "count_prompt", "detect_format",
           "item_tokens", "iter_log", "read_lines", "select"]
