"""Paper III's in-context task with an exact posterior, for any language model: two arbitrary labels.

A latent label L is one of two label tokens, uniform. A prompt shows k examples "input -> label";
each shown label equals L with probability ``alpha`` (else it is the other label), independently,
and the inputs carry no information. After the shown labels y_1..y_k the exact posterior over L is

    p(L = a | y) = alpha^n_a (1 - alpha)^n_b / (alpha^n_a (1 - alpha)^n_b + alpha^n_b (1 - alpha)^n_a)

(n_a, n_b: how often each label was shown), and the next shown label's predictive is
p(y_{k+1} = a | y) = alpha p(L = a | y) + (1 - alpha) p(L = b | y). A language model's answer is its
next-token distribution at the end of the prompt, renormalised over the two label tokens; it is
compared with the predictive (what the next label will be, the quantity a next-token model is trained
to give) and, as Paper III does, with the posterior over L. ``brute_force_predictive`` computes the
predictive by another route (the joint probability of the labels summed over L, a ratio of two such
sums) for the tests.

Prompts are built from a word list (one input word per line in a file a user can swap) and a
``encode`` function (a tokenizer's, or any str -> token ids); a model without a tokenizer can use
``token_prompts`` on token ids directly.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

SHOTS = (0, 1, 2, 4, 8)


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]  # the prompt, ending where the next label is predicted
    shown: list[int]  # the shown labels, 0 or 1 (which of the two label tokens)
    latent: int  # the latent label L, 0 or 1


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


def sample_labels(k: int, alpha: float, rng: random.Random) -> tuple[int, list[int]]:
    latent = rng.randrange(2)
    return latent, [latent if rng.random() < alpha else 1 - latent for _ in range(k)]


def token_prompts(inputs: Sequence[int], labels: tuple[int, int], shots: Sequence[int] = SHOTS, per_shot: int = 50,
                  alpha: float = 0.9, seed: int = 0, separator: Sequence[int] = ()) -> list[Prompt]:
    """Prompts over token ids: per k in ``shots``, ``per_shot`` prompts of k examples (an input id, the
    ``separator`` ids, a label id) and a final input and separator, where the label is predicted."""
    if len(set(labels)) != 2:
        raise ValueError(f"the two labels must be two different tokens, got {labels!r}")
    if not 0.5 < alpha < 1:
        raise ValueError(f"alpha (the chance a shown label is the latent one) must be in (0.5, 1), got {alpha!r}")
    rng = random.Random(seed)
    prompts = []
    for k in shots:
        for _ in range(per_shot):
            latent, shown = sample_labels(k, alpha, rng)
            tokens = []
            for y in shown:
                tokens += [rng.choice(inputs), *separator, labels[y]]
            tokens += [rng.choice(inputs), *separator]
            prompts.append(Prompt(tokens, shown, latent))
    return prompts


def text_prompts(encode: Callable[[str], list[int]], words: Sequence[str], labels: tuple[str, str],
                 **options) -> tuple[list[Prompt], tuple[int, int]]:
    """Prompts from words: "word -> label" lines. Each label must be one token for ``encode``."""
    label_ids = []
    for label in labels:
        ids = encode(" " + label)
        if len(ids) != 1:
            raise ValueError(f"the label {label!r} is {len(ids)} tokens for this tokenizer; choose one-token labels")
        label_ids.append(ids[0])
    # A word of several tokens is shown by its first one (the inputs carry no information anyway).
    inputs = [ids[0] for ids in (encode(" " + w) for w in words) if ids]
    separator = encode(" ->")
    return token_prompts(inputs, tuple(label_ids), separator=separator, **options), tuple(label_ids)


@torch.no_grad()
def label_distribution(model, prompts: list[Prompt], labels: tuple[int, int], prefix: Sequence[int] = ()
                       ) -> torch.Tensor:
    """[n, 2]: the model's next-token distribution at each prompt's end, renormalised over the two labels."""
    out = []
    for prompt in prompts:
        tokens = torch.tensor([[*prefix, *prompt.tokens]])
        logits = model(tokens)[0, -1, list(labels)].double()
        out.append(torch.softmax(logits, 0))
    return torch.stack(out)


def entropy_bits(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.log2(p.clamp_min(1e-300))).sum(-1)


def score(model_probs: torch.Tensor, prompts: list[Prompt], alpha: float) -> dict:
    """Per number of shown examples: entropy MAE of the model against the predictive and the posterior over
    L, and KL(predictive || model), in bits."""
    rows = {}
    for i, prompt in enumerate(prompts):
        rows.setdefault(len(prompt.shown), []).append(i)
    out = {}
    for k, idx in sorted(rows.items()):
        m = model_probs[idx]
        pred = torch.stack([predictive(prompts[i].shown, alpha) for i in idx])
        post = torch.stack([posterior(prompts[i].shown, alpha) for i in idx])
        kl = (pred * (torch.log2(pred) - torch.log2(m.clamp_min(1e-300)))).sum(-1)
        out[k] = dict(n=len(idx), entropy_mae_vs_predictive_bits=(entropy_bits(m) - entropy_bits(pred)).abs().mean().item(),
                      entropy_mae_vs_posterior_bits=(entropy_bits(m) - entropy_bits(post)).abs().mean().item(),
                      kl_predictive_bits=kl.mean().item())
    return out
