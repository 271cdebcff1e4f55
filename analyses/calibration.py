"""Calibration against the exact Bayes posterior.

Definitions (all in bits, over the task's C answer classes only, at query positions):
- entropy MAE: mean over sequences and query positions of |H(model) - H(Bayes)|, where H(model) is
  the entropy of the softmax over the answer-class logits. The absolute value is taken before
  averaging, so over- and under-confidence cannot cancel.
- KL: mean of KL(Bayes || model) = sum_c p_c log2(p_c / q_c) over classes with p_c > 0.
- accuracy: the model's arg-max equals the sampled answer. bayes_accuracy is the same for a
  predictor that knows the Bayes posterior (the mean of its largest probability), the ceiling.
- infeasible_mass: the model's probability on answers the Bayes posterior rules out (p_c = 0).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch

from tasks import entropy_bits

from .base import Result, answer_probs, eval_batch

DEFINITION = __doc__.split("Definitions", 1)[1].strip(" (:\n")


def measure(model, batch) -> dict:
    """Calibration numbers of ``model`` on ``batch``, plus per-query-position curves."""
    q = answer_probs(model, batch.tokens)
    p = batch.posterior.float()
    mask = batch.query_mask
    h_model, h_bayes = entropy_bits(q), batch.bayes_entropy.float()
    log_ratio = torch.log2(p.clamp_min(1e-30)) - torch.log2(q.clamp_min(1e-30))
    kl = (p * log_ratio).where(p > 0, torch.zeros_like(p)).sum(-1)
    labels = batch.targets if batch.targets.dim() == 2 else p.argmax(-1)
    correct = (q.argmax(-1) == labels).float()
    infeasible = (q * (p == 0)).sum(-1)
    err = (h_model - h_bayes).abs()

    def over_queries(x):
        return x[mask].mean().item()

    columns = mask.any(0).nonzero().flatten()

    def per_position(x):
        m = mask[:, columns].float()
        return ((x[:, columns] * m).sum(0) / m.sum(0)).tolist()

    return dict(
        entropy_mae_bits=over_queries(err),
        kl_bits=over_queries(kl),
        accuracy=over_queries(correct),
        bayes_accuracy=over_queries(p.max(-1).values),
        infeasible_mass=over_queries(infeasible),
        n_sequences=len(batch), n_queries=int(mask.sum()),
        per_position=dict(
            position=columns.tolist(),
            model_entropy_bits=per_position(h_model), bayes_entropy_bits=per_position(h_bayes),
            abs_error_bits=per_position(err), signed_error_bits=per_position(h_model - h_bayes),
            kl_bits=per_position(kl), infeasible_mass=per_position(infeasible),
        ),
    )


def staircase_figure(curves: dict, title: str) -> go.Figure:
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_scatter(x=x, y=curves["bayes_entropy_bits"], name="Bayes", mode="lines",
                    line=dict(shape="hvh", color="black", width=2))
    fig.add_scatter(x=x, y=curves["model_entropy_bits"], name="model", mode="markers",
                    marker=dict(size=8, color="#d62728"),
                    customdata=list(zip(curves["abs_error_bits"], curves["position"])),
                    hovertemplate="query %{x} (token %{customdata[1]})<br>H model %{y:.4f} bits"
                                  "<br>|error| %{customdata[0]:.2e} bits<extra></extra>")
    fig.update_layout(title=title, xaxis_title="query index", yaxis_title="entropy (bits)",
                      template="plotly_white", width=720, height=440)
    return fig


def error_figure(curves: dict) -> go.Figure:
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_bar(x=x, y=curves["abs_error_bits"], name="|H model - H Bayes|")
    fig.add_scatter(x=x, y=curves["kl_bits"], name="KL(Bayes||model)", mode="lines+markers")
    fig.update_layout(title="Calibration error by query position", xaxis_title="query index",
                      yaxis_title="bits (log scale)", yaxis_type="log", template="plotly_white",
                      width=720, height=440)
    return fig


def run(model, n: int = 2000, seed: int = 1234) -> Result:
    """Calibration of ``model`` against the exact posterior on ``n`` held-out sequences."""
    numbers = measure(model, eval_batch(model, n, seed))
    numbers["seed"] = seed
    title = (f"{model.task.name}: model vs Bayes entropy (MAE {numbers['entropy_mae_bits']:.4f} bits, "
             f"KL {numbers['kl_bits']:.4f} bits)")
    return Result("calibration", DEFINITION, numbers, {
        "staircase": staircase_figure(numbers["per_position"], title),
        "error-by-position": error_figure(numbers["per_position"]),
    })
