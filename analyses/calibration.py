"""Calibration against the exact Bayes posterior.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from tasks import entropy_bits
from tasks.regression import gaussian_entropy_bits

from .base import Analysis, Result, answer_probs, eval_batch, n_option, seed_option

DEFINITION = """\
all in bits, over the task's C answer classes only, at query positions):
- entropy MAE: mean over sequences and query positions of |H(model) - H(Bayes)|, where H(model) is
  the entropy of the softmax over the answer-class logits. The absolute value is taken before
  averaging, so over- and under-confidence cannot cancel.
- KL: mean of KL(Bayes || model) = sum_c p_c log2(p_c / q_c) over classes with p_c > 0.
- accuracy (sampled): the fraction of queries where the model's arg-max equals the answer actually
  sampled in the sequence, a hit rate with sampling noise. bayes_accuracy (expected, not sampled):
  the hit rate a predictor that knows the Bayes posterior has in expectation, the mean of the
  posterior's largest probability; the ceiling accuracy approaches. Over n sequences accuracy can
  exceed bayes_accuracy by chance.
- infeasible_mass: the model's probability on answers the Bayes posterior rules out (p_c = 0).
- Continuous tasks (a Gaussian predictive): differential entropies in bits, KL between the two
  Gaussians in bits, and mean_sq_error of the model's mean against the Bayes mean instead of accuracy.
  relative_mean_error: mean of (mu_model - mu_Bayes)^2 / var_Bayes, the mean's error in units of the
  Bayes predictive variance (0: the Bayes mean; 1: off by one predictive standard deviation on
  average). A model can keep its entropy close by inflating its variance; this number cannot.
- Regression, the Garg et al. (2022) view: for k = 0..n-1 examples in context, the squared error
  against the y actually drawn, of the model's mean, of the Bayes mean and of least squares on the k
  examples (minimum-norm below k = d), each divided by d."""


def discrete_terms(model, batch) -> dict[str, torch.Tensor]:
    """Per-position model entropy, KL(Bayes||model), correctness and ruled-out mass, [B, T] each."""
    q = answer_probs(model, batch.tokens)
    p = batch.posterior.float()
    log_ratio = torch.log2(p.clamp_min(1e-30)) - torch.log2(q.clamp_min(1e-30))
    labels = batch.targets if batch.targets.dim() == 2 else p.argmax(-1)
    return dict(model_entropy=entropy_bits(q), kl=(p * log_ratio).where(p > 0, torch.zeros_like(p)).sum(-1),
                accuracy=(q.argmax(-1) == labels).float(), bayes_accuracy=p.max(-1).values,
                infeasible_mass=(q * (p == 0)).sum(-1))


@torch.no_grad()
def gaussian_terms(model, batch) -> dict[str, torch.Tensor]:
    """The same for a Gaussian predictive: differential entropies, KL between Gaussians, and the
    squared error of the model's mean against the Bayes mean (there is no accuracy)."""
    mean, var = (torch.cat(parts) for parts in zip(*(model.predictive(batch.tokens[i:i + 1024])
                                                     for i in range(0, len(batch), 1024))))
    m_b, v_b = batch.posterior_mean.float(), batch.posterior_var.float()
    kl_nats = 0.5 * (torch.log(var / v_b) + (v_b + (m_b - mean) ** 2) / var - 1)
    return dict(model_entropy=gaussian_entropy_bits(var), kl=kl_nats / math.log(2),
                mean_sq_error=(mean - m_b) ** 2, relative_mean_error=(mean - m_b) ** 2 / v_b, model_mean=mean)


def least_squares_predictions(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """For each i, x_i . w_hat with w_hat the least-squares fit to pairs 1..i-1 (minimum norm while
    they are fewer than d; 0 with none): [B, n]. In float64, through the pseudo-inverse."""
    x, y = x.double(), y.double()
    predictions = torch.zeros(y.shape, dtype=torch.float64)
    for i in range(1, x.shape[1]):
        w_hat = torch.linalg.pinv(x[:, :i]) @ y[:, :i, None]  # [B, d, 1]
        predictions[:, i] = (x[:, i] * w_hat[..., 0]).sum(-1)
    return predictions


def in_context_curves(batch, model_mean: torch.Tensor) -> dict:
    """Squared error against the drawn y by number of in-context examples, per d (Garg et al. 2022)."""
    x, y = batch.hypothesis["x"], batch.hypothesis["y"]
    d = x.shape[-1]
    queries = slice(0, None, 2)  # query i (0-based) has seen i examples
    predictions = dict(model=model_mean[:, queries], bayes=batch.posterior_mean[:, queries],
                       least_squares=least_squares_predictions(x, y))
    curves = {f"{name}_sq_error": ((pred.double() - y.double()) ** 2 / d).mean(0).tolist()
              for name, pred in predictions.items()}
    return dict(examples=list(range(x.shape[1])), d=d, **curves)


DESCRIPTIONS = {
    "entropy_mae_bits": "mean |H(model) - H(Bayes)| over query positions, bits",
    "kl_bits": "mean KL(Bayes || model) over query positions, bits",
    "accuracy": "sampled: fraction of queries where the model's arg-max is the answer drawn in the sequence",
    "bayes_accuracy": "expected, not sampled: mean largest Bayes-posterior probability, the Bayes predictor's "
                      "hit rate (the ceiling for accuracy)",
    "infeasible_mass": "model probability on answers the Bayes posterior rules out",
    "mean_sq_error": "squared error of the model's predictive mean against the Bayes mean",
    "relative_mean_error": "(model mean - Bayes mean)^2 / Bayes predictive variance, averaged: 0 is the Bayes mean",
}


def measure(model, batch, in_context: bool = False) -> dict:
    """Calibration numbers of ``model`` on ``batch``, plus per-query-position curves (and, with
    ``in_context`` on regression, the squared-error curves by number of examples)."""
    terms = gaussian_terms(model, batch) if model.task.continuous else discrete_terms(model, batch)
    mask = batch.query_mask
    h_bayes = batch.bayes_entropy.float()
    terms["abs_error"] = (terms["model_entropy"] - h_bayes).abs()
    terms["signed_error"] = terms["model_entropy"] - h_bayes
    columns = mask.any(0).nonzero().flatten()

    def per_position(x):
        m = mask[:, columns].float()
        return ((x[:, columns] * m).sum(0) / m.sum(0)).tolist()

    numbers = dict(entropy_mae_bits=terms["abs_error"][mask].mean().item(), kl_bits=terms["kl"][mask].mean().item())
    for name in ("accuracy", "bayes_accuracy", "infeasible_mass", "mean_sq_error", "relative_mean_error"):
        if name in terms:
            numbers[name] = terms[name][mask].mean().item()
    numbers.update(n_sequences=len(batch), n_queries=int(mask.sum()))
    numbers["per_position"] = dict(
        position=columns.tolist(), model_entropy_bits=per_position(terms["model_entropy"]),
        bayes_entropy_bits=per_position(h_bayes), abs_error_bits=per_position(terms["abs_error"]),
        signed_error_bits=per_position(terms["signed_error"]), kl_bits=per_position(terms["kl"]),
        **({"infeasible_mass": per_position(terms["infeasible_mass"])} if "infeasible_mass" in terms else {}),
        **({"relative_mean_error": per_position(terms["relative_mean_error"])}
           if "relative_mean_error" in terms else {}),
    )
    if in_context and model.task.linear_in_context:
        numbers["in_context"] = in_context_curves(batch, terms["model_mean"])
    return numbers


def staircase_figure(curves: dict, title: str, intact: dict | None = None) -> go.Figure:
    """Model against Bayes entropy per query; ``intact``: the curves of the model before an ablation, drawn too."""
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_scatter(x=x, y=curves["bayes_entropy_bits"], name="Bayes", mode="lines",
                    line=dict(shape="hvh", color="black", width=2))
    if intact is not None:
        fig.add_scatter(x=x, y=intact["model_entropy_bits"], name="intact model", mode="markers",
                        marker=dict(size=9, color="#7f7f7f", symbol="circle-open"),
                        hovertemplate="query %{x}<br>H intact model %{y:.4f} bits<extra></extra>")
    fig.add_scatter(x=x, y=curves["model_entropy_bits"], name="model", mode="markers",
                    marker=dict(size=8, color="#d62728"),
                    customdata=list(zip(curves["abs_error_bits"], curves["position"])),
                    hovertemplate="query %{x} (token %{customdata[1]})<br>H model %{y:.4f} bits"
                                  "<br>|error| %{customdata[0]:.2e} bits<extra></extra>")
    fig.update_layout(title=title, xaxis_title="query index", yaxis_title="entropy (bits)",
                      width=720, height=440)
    return fig


def error_figure(curves: dict) -> go.Figure:
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_bar(x=x, y=curves["abs_error_bits"], name="|H model - H Bayes|")
    fig.add_scatter(x=x, y=curves["kl_bits"], name="KL(Bayes||model)", mode="lines+markers")
    fig.update_layout(title="Calibration error by query position", xaxis_title="query index",
                      yaxis_title="bits (log scale)", yaxis_type="log", 
                      width=720, height=440)
    return fig


def in_context_figure(curves: dict) -> go.Figure:
    d, fig = curves["d"], go.Figure()
    styles = dict(model=("model mean", "#d62728", "solid"), bayes=("Bayes mean", "black", "solid"),
                  least_squares=("least squares", "#1f77b4", "dash"))
    for name, (label, colour, dash) in styles.items():
        fig.add_scatter(x=curves["examples"], y=curves[f"{name}_sq_error"], name=label, mode="lines+markers",
                        line=dict(color=colour, dash=dash), marker=dict(size=5))
    fig.add_vline(x=d, line=dict(color="grey", dash="dot"), annotation_text=f"k = d = {d}",
                  annotation_position="top right")
    # log scale: least squares' error peaks by orders of magnitude at k = d (it interpolates the noise)
    fig.update_layout(title="Squared error against the drawn y by number of in-context examples",
                      xaxis_title="in-context examples k", yaxis_title="squared error / d (log scale)",
                      yaxis_type="log",
                      width=720, height=440)
    return fig


def compute(model, n: int = 2000, seed: int = 1234) -> Result:
    """Calibration of ``model`` against the exact posterior on ``n`` held-out sequences."""
    numbers = measure(model, eval_batch(model, n, seed), in_context=True)
    numbers["seed"] = seed
    title = (f"{model.task.name}: model vs Bayes entropy (MAE {numbers['entropy_mae_bits']:.4f} bits, "
             f"KL {numbers['kl_bits']:.4f} bits)")
    if "accuracy" in numbers:
        title += (f"<br><sup>accuracy {numbers['accuracy']:.4f} (sampled answers) vs bayes_accuracy "
                  f"{numbers['bayes_accuracy']:.4f} (expected hit rate of the exact posterior)</sup>")
    if "relative_mean_error" in numbers:
        title += f"<br><sup>relative mean error {numbers['relative_mean_error']:.3f} (in Bayes predictive variances)</sup>"
    figures = {"staircase": staircase_figure(numbers["per_position"], title),
               "error-by-position": error_figure(numbers["per_position"])}
    if "in_context" in numbers:
        figures["in-context"] = in_context_figure(numbers["in_context"])
    return Result("calibration", DEFINITION, numbers, figures, descriptions={k: v for k, v in DESCRIPTIONS.items() if k in numbers})


ANALYSIS = Analysis("calibration", "entropy MAE, KL and accuracy against the exact Bayes posterior", DEFINITION,
                    compute, options=(n_option(2000), seed_option()), order=0)
run = ANALYSIS
