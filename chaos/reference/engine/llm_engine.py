"""The engine loop: admit requests, run one scheduled step, turn sampled ids into outputs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..config import EngineConfig
from ..tokenizer import ByteTokenizer
from .block_manager import BlockManager
from .model_runner import ModelRunner
from .output import TextStream
from .scheduler import Scheduler
from .sequence import SamplingParams, Sequence, SequenceStatus

log = logging.getLogger("chaos.reference")


@dataclass(slots=True)
class RequestOutput:
    """What one step produced for one request."""

    request_id: str
    text: str = ""  # new text since the previous output
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None  # stop | length | abort | error
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    queue_time: float | None = None  # arrival to first scheduled, on the first output
    error: str | None = None
    # With finish_reason "error": 400 the request's own input is to blame, 500 it failed inside the engine
    # (that request alone), 503 the server cannot hold it now (KV cache).
    error_status: int | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.tokenizer = ByteTokenizer()
        self.model_runner = ModelRunner(config)
        self.block_manager = BlockManager(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        # Read once per sequence per step (_append_token): kept as plain attributes, not looked up each time.
        self.max_model_len = config.max_model_len
        self.stop_ids = self.tokenizer.stop_ids
        self.seqs: dict[str, Sequence] = {}
        self.texts: dict[str, TextStream] = {}
        self.num_prompt_tokens_total = 0
        self.num_generation_tokens_total = 0
        self.num_steps = 0

    # -- requests ---------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        """Queue a request. ValueError: its input is unusable (nothing was registered)."""
        if request_id in self.seqs:
            raise ValueError(f"duplicate request id {request_id!r}")
        if len(prompt_ids) >= self.config.max_model_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit max_model_len "
                             f"{self.config.max_model_len}")
        vocab = self.config.model.vocab_size
        if prompt_ids and not (0 <= min(prompt_ids) and max(prompt_ids) < vocab):  # else the embedding raises
            raise ValueError(f"prompt token ids must be in [0, {vocab})")  # mid-step, for the whole batch
        # Everything that can fail is built before anything is registered, so a failure leaves no trace.
        seq = Sequence(request_id, prompt_ids, params)
        text = TextStream(params.stop)
        self.seqs[request_id] = seq
        self.texts[request_id] = text
        self.scheduler.add(seq)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Drop a request and free its blocks now. None if it is unknown or already done."""
        seq = self.seqs.get(request_id)
        if seq is None:
            return None
        self.scheduler.remove(seq)
        return self._finish(seq, "abort")

    def has_unfinished_requests(self) -> bool:
        return bool(self.seqs)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    # -- one step ---------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        scheduled, infeasible = self.scheduler.schedule()
        outputs = [self._finish(seq, "error", error=(
            "the KV cache cannot hold this request "
            f"({self.block_manager.capacity} blocks of {self.config.block_size} tokens usable)"), status=503)
            for seq in infeasible]
        if not scheduled:
            return outputs
        now = time.monotonic()
        for seq in scheduled:
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
        sampled = self.model_runner.run(scheduled)
        self.num_steps += 1
        for seq in scheduled:
            seq.num_computed_tokens += seq.scheduled_tokens
            self.block_manager.commit_full_blocks(seq)
            token = sampled.get(seq.request_id)
            if token is None:
                continue
            if isinstance(token, Exception):
                outputs.append(self._fail(seq, f"sampling failed for this request: {token!r}"))
                continue
            try:
                outputs.append(self._append_token(seq, token))
            except Exception as e:  # detokenizing or stop strings: this request's problem, not the batch's
                log.warning("request %s failed after its token: %r", seq.request_id, e)
                outputs.append(self._fail(seq, f"decoding this request's output failed: {e!r}"))
        return outputs

    def _fail(self, seq: Sequence, message: str) -> RequestOutput:
        """End one sequence with a 500 of its own and free its blocks; touches no shared text state."""
        if seq.status is not SequenceStatus.FINISHED:
            self.scheduler.remove(seq)
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, "error"
        self.seqs.pop(seq.request_id, None)
        self.texts.pop(seq.request_id, None)
        return RequestOutput(seq.request_id, finish_reason="error", num_prompt_tokens=seq.num_prompt_tokens,
                             num_output_tokens=seq.num_output_tokens, error=message, error_status=500)

    def _append_token(self, seq: Sequence, token: int) -> RequestOutput:
        # Runs for every sequence of every step: lengths are read once, not through properties.
        queue_time = None
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
            self.num_prompt_tokens_total += seq.num_prompt_tokens  # once a request, cached or not (as vLLM)
            queue_time = seq.first_scheduled_time - seq.arrival_time
        token_ids = seq.token_ids
        token_ids.append(token)
        self.num_generation_tokens_total += 1
        params, text = seq.params, self.texts[seq.request_id]
        num_output = len(token_ids) - seq.num_prompt_tokens
        reason = None
        if token in self.stop_ids and not params.ignore_eos:
            reason = "stop"
        elif text.append(token):
            reason = "stop"
        elif num_output >= params.max_tokens or len(token_ids) >= self.max_model_len:
            reason = "length"
        if reason is not None:
            self.scheduler.remove(seq)
            out = self._finish(seq, reason, last_token=token)
            out.queue_time = queue_time
            return out
        return RequestOutput(seq.request_id, text.take(final=False), (token,),
                             num_prompt_tokens=seq.num_prompt_tokens, num_output_tokens=num_output,
                             num_cached_tokens=seq.num_cached_tokens, queue_time=queue_time)

    def _finish(self, seq: Sequence, reason: str, last_token: int | None = None,
                error: str | None = None, status: int | None = None) -> RequestOutput:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        del self.seqs[seq.request_id]
        text = self.texts.pop(seq.request_id)
        if reason != "stop" or last_token in self.tokenizer.stop_ids:
            text.finish()
        return RequestOutput(seq.request_id, text.take(final=True),
                             () if last_token is None else (last_token,), reason,
                             seq.num_prompt_tokens, seq.num_output_tokens, seq.num_cached_tokens, error=error,
                             error_status=status)

    # -- offline use (tests, benchmarks) ----------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams],
                 max_steps: int = 1_000_000) -> list[RequestOutput]:
        """Run prompts to completion; one combined output each (full text and token ids)."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        base = f"gen{self.num_steps}-{id(prompts)}-"
        results: dict[str, RequestOutput] = {}
        for i, (p, sp) in enumerate(zip(prompts, plist)):
            rid = f"{base}{i}"
            self.add_request(rid, p, sp)
            results[rid] = RequestOutput(rid)
        for _ in range(max_steps):
            if not any(not r.finished for r in results.values()):
                break
            for out in self.step():
                r = results.get(out.request_id)
                if r is None:
                    continue
                r.text += out.text
                r.token_ids += out.token_ids
                r.finish_reason, r.error, r.error_status = out.finish_reason, out.error, out.error_status
                r.num_prompt_tokens, r.num_output_tokens = out.num_prompt_tokens, out.num_output_tokens
                r.num_cached_tokens = out.num_cached_tokens
        return list(results.values())
