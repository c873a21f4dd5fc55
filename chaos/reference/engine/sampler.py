"""Turns the logits of one step into next-token ids.

Greedy rows take the argmax and never touch a random generator, so their output does
not depend on what else is in the batch. Rows without a seed are drawn together, in one
batched softmax / top-p / draw (on a GPU a per-row loop would cost a few kernel
launches per sequence per step). A seeded row draws from its own generator, alone, so
its output depends only on its seed. The ids are the only thing copied back to the host.
"""

from __future__ import annotations

import torch

from .sequence import Sequence


class Sampler:
    def __init__(self, device: torch.device, emittable_vocab: int):
        self.device = device
        self.emittable_vocab = emittable_vocab  # ids past the tokenizer's vocabulary are never sampled
        self.generator = torch.Generator(device=device)
        self.generator.seed()

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        if logits.shape[-1] > self.emittable_vocab:
            logits = logits[:, :self.emittable_vocab]
        shared: list[int] = []
        seeded: list[int] = []
        for i, s in enumerate(seqs):  # one pass: this runs for every row of every step
            if not s.params.greedy:
                (shared if s.params.seed is None else seeded).append(i)
        if len(shared) == len(seqs):  # the common sampled batch: no gather, no scatter
            return self._sample(logits, seqs, self.generator).tolist()
        ids = logits.argmax(dim=-1)
        if shared:
            ids[shared] = self._sample(logits[shared], [seqs[i] for i in shared], self.generator)
        for i in seeded:
            seq = seqs[i]
            if seq.generator is None:
                seq.generator = torch.Generator(device=self.device).manual_seed(seq.params.seed)
            ids[i] = self._sample(logits[i:i + 1], [seq], seq.generator)[0]
        return ids.tolist()

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence], generator: torch.Generator) -> torch.Tensor:
        """One id per row of logits [R, V], each row with its sequence's temperature, top_p and top_k."""
        probs = torch.softmax(logits / self._per_row([s.params.temperature for s in seqs], logits), dim=-1)
        top_p = [s.params.top_p for s in seqs]
        vocab = probs.shape[-1]
        top_k = [s.params.top_k if 0 < s.params.top_k < vocab else vocab for s in seqs]
        if min(top_p) < 1.0 or min(top_k) < vocab:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest head of each row whose mass reaches top_p, and at most top_k of it; the top
            # token always stays.
            keep = sorted_probs.cumsum(-1) - sorted_probs < self._per_row(top_p, logits)
            if min(top_k) < vocab:
                rank = torch.arange(vocab, device=probs.device)
                keep &= rank < self._per_row(top_k, rank.unsqueeze(0))
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs * keep)
        # argmax(p / E) with E ~ Exp(1) draws i with probability p_i (as multinomial would), without the
        # validity checks that make multinomial wait for the device on some versions.
        noise = torch.empty_like(probs).exponential_(1.0, generator=generator)
        noise.clamp_(min=torch.finfo(noise.dtype).tiny)  # a drawn 0 must not turn an excluded token's 0/0 into NaN
        return (probs / noise).argmax(dim=-1)

    @staticmethod
    def _per_row(values: list[float], like: torch.Tensor) -> float | torch.Tensor:
        """A scalar when every row agrees (no upload), else a [R, 1] column."""
        if all(v == values[0] for v in values):
            return values[0]
        return torch.tensor(values, device=like.device, dtype=like.dtype).unsqueeze(1)
