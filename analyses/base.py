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


def eval_batch(model, n: int, seed: int):
    """A held-out batch of the model's task, on the model's device; same (n, seed), same batch."""
    if n < 1:
        raise AnalysisError(f"need at least one sequence, got n={n}")
    batch = model.task.sample(n, generator=torch.Generator().manual_seed(seed))
    return batch.to(next(model.parameters()).device)


@torch.no_grad()
def answer_probs(model, tokens: torch.Tensor, chunk: int = 1024, **kwargs) -> torch.Tensor:
    """``model.answer_probs`` in chunks, without gradients, as float32."""
    return torch.cat([model.answer_probs(tokens[i:i + chunk], **kwargs).float()
                      for i in range(0, len(tokens), chunk)])
