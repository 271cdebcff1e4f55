"""What every analysis returns, and the helpers they share."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


class AnalysisError(ValueError):
    """The analysis cannot run on this model or with these options; the message says why."""


@dataclass
class Result:
    name: str
    definition: str  # the exact definition of the numbers, also written into the JSON
    metrics: dict  # JSON-serialisable numbers
    figures: dict = field(default_factory=dict)  # {name: plotly Figure}, in display order


def require_attention(model, analysis: str) -> None:
    if not getattr(model, "has_attention", lambda: False)():
        raise AnalysisError(f"{analysis} needs an attention model; {getattr(model, 'arch', type(model).__name__)} "
                            f"has no attention heads (try calibration instead)")


# Training batches are seeded by seed * 1_000_003 + step; held-out batches live far above that.
HELD_OUT_SEED_BASE = 1 << 40


def held_out_batch(task, n: int, seed: int):
    """A held-out batch of ``task``: same (n, seed), same batch, never one seen in training."""
    if n < 1:
        raise AnalysisError(f"need at least one sequence, got n={n}")
    if not 0 <= seed < 2 ** 32:  # seeds are offset and scaled into torch's 64-bit seed range
        raise AnalysisError(f"seed must be an integer from 0 to 2^32 - 1, got {seed}")
    return task.sample(n, generator=torch.Generator().manual_seed(HELD_OUT_SEED_BASE + seed))


def eval_batch(model, n: int, seed: int):
    """A held-out batch of the model's task, on the model's device."""
    batch = held_out_batch(model.task, n, seed)
    return batch.to(next(model.parameters()).device)


@torch.no_grad()
def answer_probs(model, tokens: torch.Tensor, chunk: int = 1024, **kwargs) -> torch.Tensor:
    """``model.answer_probs`` in chunks, without gradients, as float32."""
    return torch.cat([model.answer_probs(tokens[i:i + chunk], **kwargs).float()
                      for i in range(0, len(tokens), chunk)])


def untrained_twin(model):
    """The same architecture, config and seed as ``model`` at initialisation: its step-0 weights,
    on the model's device, for baselines that separate what training did from what the shape gives."""
    import models

    twin = models.build(model.arch, model.task, config=model.config.to_dict(), seed=getattr(model, "seed", 0))
    return twin.to(next(model.parameters()).device).eval()
