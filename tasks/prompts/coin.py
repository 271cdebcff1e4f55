"""A Beta-Bernoulli coin: flips of a coin of unknown bias, and the next flip.

The bias p is drawn from the uniform prior Beta(1, 1); a prompt shows k flips, each one of two tokens
("heads", "tails"). After h heads and t tails the posterior over p is Beta(1 + h, 1 + t) and the next
flip's predictive is Laplace's rule, p(heads) = (h + 1) / (k + 2). The posterior entropy that orders
a value manifold is the differential entropy of that Beta, in bits (it falls below 0 as the posterior
narrows). ``alpha`` is not used: the prior is the task.
"""
from __future__ import annotations

import math
import random
from typing import Sequence

import torch

from .base import Prompt, PromptSet, PromptTask, log2_beta, one_token

SHOTS = (0, 1, 2, 4, 8, 16)
FACES = ("heads", "tails")


def predictive(shown: Sequence[int]) -> torch.Tensor:
    """p(next = heads), p(next = tails) after the flips ``shown`` (0 = heads), under a uniform prior."""
    heads = len(shown) - sum(shown)
    p = (heads + 1) / (len(shown) + 2)
    return torch.tensor([p, 1 - p], dtype=torch.float64)


def beta_entropy_bits(a: float, b: float) -> float:
    """Differential entropy of Beta(a, b) in bits."""
    digamma = torch.special.digamma
    nats = (log2_beta(a, b) * math.log(2) - (a - 1) * digamma(torch.tensor(a, dtype=torch.float64)).item()
            - (b - 1) * digamma(torch.tensor(b, dtype=torch.float64)).item()
            + (a + b - 2) * digamma(torch.tensor(a + b, dtype=torch.float64)).item())
    return nats / math.log(2)


class Coin(PromptTask):
    name = "coin"
    summary = "k in {0,1,2,4,8,16} flips of a coin whose bias is uniform; predict the next flip"
    order = 10

    def predictive(self, shown: Sequence[int], alpha: float) -> torch.Tensor:
        return predictive(shown)

    def build(self, lm, words: Sequence[str], per_shot: int, alpha: float, seed: int) -> PromptSet:
        encode = lm.encode
        faces = (0, 1) if encode is None else tuple(one_token(encode, face) for face in FACES)
        prefix = [2] if encode is None else encode("Coin flips:")  # id 2: a start token, so k = 0 is a prompt
        rng = random.Random(seed)
        prompts = []
        for k in SHOTS:
            for _ in range(per_shot):
                p = rng.random()
                shown = [0 if rng.random() < p else 1 for _ in range(k)]
                heads = k - sum(shown)
                prompts.append(Prompt([*prefix, *(faces[y] for y in shown)], shown, predictive(shown),
                                      beta_entropy_bits(1 + heads, 1 + k - heads)))
        return PromptSet(prompts, faces)
