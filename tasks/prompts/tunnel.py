"""A wind-tunnel transformer's own task as prompts: the sanity row for the language-model diagnostics.

Each held-out sequence of the model's task (the same held-out batches the wind-tunnel analyses use),
cut after each of its query positions, is one prompt; the answer tokens are the task's answer classes
and the Bayes predictive is the task's exact posterior at that query. ``shown`` counts the queries
before it (on bijection, the values already revealed). ``per_shot`` is the number of sequences.
"""
from __future__ import annotations

from typing import Sequence


from ..base import held_out_batch
from .base import Prompt, PromptSet, PromptTask


class WindTunnel(PromptTask):
    name = "wind-tunnel"
    summary = "a wind-tunnel transformer's own task, each held-out sequence cut after each query"
    order = 20

    def build(self, lm, words: Sequence[str], per_shot: int, alpha: float, seed: int) -> PromptSet:
        task = lm.task
        if task is None:
            raise ValueError("wind-tunnel prompts need a wind-tunnel transformer (--model a shipped name or run "
                             "folder); a language model takes two-label or coin")
        if task.continuous:
            raise ValueError(f"wind-tunnel prompts need a discrete task; {task.name!r} has a Gaussian answer head")
        batch = held_out_batch(task, per_shot, seed)
        answers = tuple(range(task.answer_token_offset, task.answer_token_offset + task.n_classes))
        prompts, sequence = [], []
        for row in range(len(batch.tokens)):
            queries = batch.query_mask[row].nonzero().flatten().tolist()
            for i, q in enumerate(queries):
                prompts.append(Prompt(batch.tokens[row, :q + 1].tolist(), [0] * i,
                                      batch.posterior[row, q].double(), batch.bayes_entropy[row, q].item()))
                sequence.append(row)
        return PromptSet(prompts, answers, sequence=sequence)
