"""Attention focusing: how far below uniform is each head's attention where the answer is predicted?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from models.base import act_name
from tasks.base import entropy_bits

from . import activations
from .base import Analysis, AnalysisError, Result, n_option, seed_option
from .style import error_bars

DEFINITION = " ".join("""
 On a language model, at the last position of every prompt of the prompt task (where one of the two
answer tokens is predicted), each query head's attention row over the T positions it can attend
gives its entropy H in bits, normalised by its maximum log2 T: h = H / log2 T (1 = uniform over the
context, 0 = all weight on one position). The normalisation matters because prompts grow with the
number of shown examples and the raw entropy with them. Prompts of one token (nothing to choose) are
left out. Per layer and head, h is averaged over prompts; the entropy reduction is 1 - h (Paper III
reports 80-90% for full multi-head attention, 20-30% for grouped-query or sliding-window models).
Reported per layer (mean over heads), per head, overall (mean over layers and heads) and per number of
shown examples. Heads are query heads: a grouped-query model's heads that share keys still each have
their own pattern. Every number comes with a 95% percentile bootstrap interval (2,000 resamples, seeded)
resampling prompts, or on a wind-tunnel model the held-out sequences the prompts were cut from (the
prompts of one sequence share its hidden truth): the attention is measured once, and each resample
re-averages the per-prompt h.
""".split())

DESCRIPTIONS = {
    "entropy_reduction": "1 - h, h the normalised attention entropy at the answer position, mean over prompts, "
                         "layers and heads",
    "intervals": "95% percentile bootstrap intervals (2,000 resamples) of entropy_reduction, by_layer, by_head and "
                 "by_shots, resampling prompts (a wind-tunnel model: the held-out sequences they were cut from)",
    "n_sequences": "units the intervals resample: held-out sequences (wind-tunnel prompts) or prompts",
}


def normalised_entropy(rows: torch.Tensor) -> torch.Tensor:
    """H(row) / log2(T) for attention rows [..., T], T >= 2."""
    T = rows.shape[-1]
    return entropy_bits(rows) / math.log2(T)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int) -> Result:
    prompt_set = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    cfg = lm.model.cfg
    names = [act_name("pattern", l) for l in range(cfg.n_layers)]
    _, caught = activations.last_positions(lm, prompt_set, names)
    keep = [i for i, p in enumerate(prompt_set.prompts) if len(p.tokens) >= 2]
    if not keep:
        raise AnalysisError("every prompt is one token long: no attention to measure")
    h = torch.stack([torch.stack([normalised_entropy(caught[n][i]) for n in names]) for i in keep])  # [n, L, H]
    shots = prompt_set.shots[keep]
    per_head = 1 - h.mean(0)
    ks = shots.unique()
    metrics = dict(entropy_reduction=per_head.mean().item(), by_layer=per_head.mean(1).tolist(),
                   by_head=per_head.tolist(), normalised_entropy_by_layer=h.mean((0, 2)).tolist(),
                   by_shots={int(k): (1 - h[shots == k].mean()).item() for k in ks},
                   n_prompts=len(keep), n_heads=cfg.n_heads, n_kv_heads=getattr(cfg, "n_key_value_heads", None)
                   or cfg.n_heads)
    metrics["intervals"] = focusing_intervals(1 - h, shots, ks, subset(prompt_set, keep))
    metrics["n_sequences"] = activations.n_sequences(subset(prompt_set, keep))
    metrics["bootstrap_unit"] = "prompts" if prompt_set.sequence is None else "sequences"
    subject = prompt_set.description
    return Result("attention-focusing", DEFINITION, metrics, {
        "by-head": heads_figure(per_head, subject, metrics["intervals"]["by_head"]), "by-layer": layers_figure(per_head, subject, metrics)},
        descriptions=DESCRIPTIONS)


def subset(prompt_set, rows: list[int]):
    """The prompts ``rows`` of a prompt set, each still with the sequence it was cut from."""
    from tasks.prompts import PromptSet

    sequence = None if prompt_set.sequence is None else [prompt_set.sequence[i] for i in rows]
    return PromptSet([prompt_set.prompts[i] for i in rows], prompt_set.answers, prompt_set.description, sequence)


def focusing_intervals(reduction: torch.Tensor, shots: torch.Tensor, ks: torch.Tensor, prompt_set) -> dict:
    """Intervals of the overall, per-layer, per-head and per-shots means of the per-prompt reductions [n, L, H],
    all from one resampling (one column each; a number of shots is a column weighted by its prompts)."""
    n, L, H = reduction.shape
    overall = reduction.mean((1, 2))[:, None]
    values = torch.cat([overall, reduction.mean(2), reduction.reshape(n, L * H), overall.expand(n, len(ks))], 1)
    weights = torch.cat([torch.ones(n, 1 + L + L * H), (shots[:, None] == ks[None]).double()], 1)
    bounds = activations.mean_intervals(values, prompt_set, weights)
    return dict(entropy_reduction=bounds[0], by_layer=bounds[1:1 + L],
                by_head=[bounds[1 + L + l * H:1 + L + (l + 1) * H] for l in range(L)],
                by_shots={int(k): bound for k, bound in zip(ks, bounds[1 + L + L * H:])})


def heads_figure(per_head: torch.Tensor, subject: str, intervals: list) -> go.Figure:
    L, H = per_head.shape
    fig = go.Figure(go.Heatmap(z=per_head.numpy(), x=[f"H{h}" for h in range(H)], y=[f"L{l}" for l in range(L)],
                               zmin=0, zmax=1, colorscale="Viridis", colorbar=dict(title="1 - H/log2 T"),
                               customdata=intervals,
                               hovertemplate="layer %{y}, head %{x}<br>entropy reduction %{z:.3f} (95% CI "
                                             "%{customdata[0]:.3f} … %{customdata[1]:.3f})<extra></extra>"))
    fig.update_layout(title=f"{subject}: attention entropy reduction per head at the answer position",
                      xaxis_title="head", yaxis_title="layer", yaxis_autorange="reversed", 
                      width=200 + 40 * H, height=200 + 30 * L)
    return fig


def layers_figure(per_head: torch.Tensor, subject: str, metrics: dict) -> go.Figure:
    layers = list(range(per_head.shape[0]))
    fig = go.Figure()
    fig.add_scatter(x=layers, y=per_head.mean(1).tolist(), mode="lines+markers", name="mean over heads (95% CI)",
                    error_y=error_bars(metrics["by_layer"], metrics["intervals"]["by_layer"]),
                    customdata=metrics["intervals"]["by_layer"],
                    hovertemplate="layer %{x}: %{y:.3f} (95% CI %{customdata[0]:.3f} … %{customdata[1]:.3f})"
                                  "<extra></extra>")
    fig.add_scatter(x=layers, y=per_head.min(1).values.tolist(), mode="lines", name="least focused head",
                    line=dict(dash="dot", color="gray"))
    fig.add_scatter(x=layers, y=per_head.max(1).values.tolist(), mode="lines", name="most focused head",
                    line=dict(dash="dash", color="gray"))
    fig.update_layout(title=f"{subject}: attention entropy reduction by layer (1 = one position, 0 = uniform)"
                            f"<br><sup>bars: 95% bootstrap intervals over {metrics['n_sequences']:,} "
                            f"{metrics['bootstrap_unit']} ({metrics['n_prompts']:,} prompts)</sup>",
                      xaxis=dict(title="layer", tickmode="array", tickvals=layers),
                      yaxis=dict(title="1 - H / log2 T", range=[0, 1.02]), width=760,
                      height=440)
    return fig


WIND_TUNNEL_DEFINITION = DEFINITION.replace("On a language model, at", "At") + (
    " On a wind-tunnel model the prompts are n held-out sequences of its task, each cut after each of its query "
    "positions, and the answer tokens are the task's answer classes.")


def compute(model, n: int = 50, seed: int = 1234) -> Result:
    """On a wind-tunnel transformer: the same numbers on its own held-out sequences, cut at every query."""
    result = on_language_model(activations.as_language_model(model), prompts="wind-tunnel", words="mixed", per_shot=n,
                               alpha=0.9, seed=seed)
    result.definition = WIND_TUNNEL_DEFINITION
    return result


ANALYSIS = Analysis(
    "attention-focusing", "attention entropy at the answer position, normalised by context length, per head",
    WIND_TUNNEL_DEFINITION, compute,
    options=(n_option(50), seed_option()), requires=("attention", "discrete"), order=20,
    on_language_model=on_language_model, language_options=activations.language_options(),
    language_definition=DEFINITION)
