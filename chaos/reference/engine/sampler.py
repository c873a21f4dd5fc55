"""Turns the logits of one step into next-token ids.

Greedy rows take the argmax and never touch a random generator, so their output does
not depend on what else is in the batch. Seeded rows draw from their own generator.
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
        ids = logits.argmax(dim=-1)
        random_rows = [i for i, s in enumerate(seqs) if not s.params.greedy]
        if random_rows:
            ids = ids.clone()
            for i in random_rows:
                ids[i] = self._sample_row(logits[i], seqs[i])
        return ids.tolist()

    def _sample_row(self, logits: torch.Tensor, seq: Sequence) -> torch.Tensor:
        p = seq.params
        probs = torch.softmax(logits / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < p.top_p  # always keeps the top token
            sorted_probs = sorted_probs * keep
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        if p.seed is not None and seq.generator is None:
            seq.generator = torch.Generator(device=self.device).manual_seed(p.seed)
        gen = seq.generator or self.generator
        return torch.multinomial(probs, 1, generator=gen)[0]
