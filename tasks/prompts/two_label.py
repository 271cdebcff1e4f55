"""Paper III's in-context task with an exact posterior: two arbitrary labels ("SULA").

A latent label L is one of two label tokens, uniform. A prompt shows k examples "input -> label";
each shown label equals L with probability ``alpha`` (else it is the other label), independently,
and the inputs carry no information. After the shown labels y_1..y_k the exact posterior over L is

    p(L = a | y) = alpha^n_a (1 - alpha)^n_b / (alpha^n_a (1 - alpha)^n_b + alpha^n_b (1 - alpha)^n_a)

(n_a, n_b: how often each label was shown), and the next shown label's predictive is
p(y_{k+1} = a | y) = alpha p(L = a | y) + (1 - alpha) p(L = b | y): what a next-token model is trained
to give. ``brute_force_predictive`` computes it by another route (a ratio of joint probabilities summed
over L) for the tests. The posterior entropy that orders a value manifold is that of p(L | y).
"""
from __future__ import annotations

import math
import random
from typing import Sequence

import torch

from ..base import entropy_bits
from .base import SHOTS, Prompt, PromptSet, PromptTask, one_token

LABELS = ("blue", "green")  # two arbitrary words, one token each for common BPE vocabularies


def posterior(shown: Sequence[int], alpha: float) -> torch.Tensor:
    """p(L = 0), p(L = 1) given the shown labels (float64)."""
    n1 = sum(shown)
    n0 = len(shown) - n1
    # in log space: alpha^n (1 - alpha)^m underflows for long prompts
    log = torch.tensor([n0 * math.log(alpha) + n1 * math.log(1 - alpha),
                        n1 * math.log(alpha) + n0 * math.log(1 - alpha)], dtype=torch.float64)
    return torch.softmax(log, 0)


def predictive(shown: Sequence[int], alpha: float) -> torch.Tensor:
    """p(next shown label = 0), p(= 1) given the shown labels."""
    p = posterior(shown, alpha)
    return alpha * p + (1 - alpha) * p.flip(0)


def brute_force_predictive(shown: Sequence[int], alpha: float) -> torch.Tensor:
    """The predictive as p(y_1..y_k, y) / p(y_1..y_k), each a sum over L of the product of label chances."""
    def joint(labels):
        return sum(0.5 * math.prod(alpha if y == latent else 1 - alpha for y in labels) for latent in (0, 1))
    total = joint(shown)
    return torch.tensor([joint([*shown, y]) / total for y in (0, 1)], dtype=torch.float64)


def check_alpha(alpha: float) -> None:
    if not 0.5 < alpha < 1:
        raise ValueError(f"alpha (the chance a shown label is the latent one) must be in (0.5, 1), got {alpha!r}")


def token_prompts(inputs: Sequence[int], labels: tuple[int, int], shots: Sequence[int] = SHOTS, per_shot: int = 50,
                  alpha: float = 0.9, seed: int = 0, separator: Sequence[int] = ()) -> PromptSet:
    """Per k in ``shots``, ``per_shot`` prompts of k examples (an input id, the ``separator`` ids, a label
    id) and a final input and separator, where the label is predicted."""
    if len(set(labels)) != 2:
        raise ValueError(f"the two labels must be two different tokens, got {labels!r}")
    check_alpha(alpha)
    rng = random.Random(seed)
    prompts = []
    for k in shots:
        for _ in range(per_shot):
            latent = rng.randrange(2)
            shown = [latent if rng.random() < alpha else 1 - latent for _ in range(k)]
            tokens = []
            for y in shown:
                tokens += [rng.choice(inputs), *separator, labels[y]]
            tokens += [rng.choice(inputs), *separator]
            prompts.append(Prompt(tokens, shown, predictive(shown, alpha),
                                  entropy_bits(posterior(shown, alpha)).item()))
    return PromptSet(prompts, tuple(labels))


class TwoLabel(PromptTask):
    name = "two-label"
    summary = "k in {0,1,2,4,8} examples 'word -> label'; each shown label is the latent one with chance alpha"
    order = 0
    uses_words = True

    def predictive(self, shown: Sequence[int], alpha: float) -> torch.Tensor:
        return predictive(shown, alpha)

    def build(self, lm, words: Sequence[str], per_shot: int, alpha: float, seed: int) -> PromptSet:
        check_alpha(alpha)
        encode, vocab_size = lm.encode, lm.model.cfg.d_vocab
        if encode is None:  # token ids: the labels are ids 0 and 1, the inputs every other id (up to 200)
            if vocab_size < 4:
                raise ValueError(f"a vocabulary of {vocab_size} tokens is too small for two labels and inputs")
            return token_prompts(range(2, min(vocab_size, 202)), (0, 1), per_shot=per_shot, alpha=alpha, seed=seed)
        labels = tuple(one_token(encode, label) for label in LABELS)
        # A word of several tokens is shown by its first one (the inputs carry no information anyway).
        inputs = [ids[0] for ids in (encode(" " + w) for w in words) if ids]
        return token_prompts(inputs, labels, per_shot=per_shot, alpha=alpha, seed=seed, separator=encode(" ->"))
