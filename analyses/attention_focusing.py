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
their own pattern.
""".split())


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
    metrics = dict(entropy_reduction=per_head.mean().item(), by_layer=per_head.mean(1).tolist(),
                   by_head=per_head.tolist(), normalised_entropy_by_layer=h.mean((0, 2)).tolist(),
                   by_shots={int(k): (1 - h[shots == k].mean()).item() for k in shots.unique()},
                   n_prompts=len(keep), n_heads=cfg.n_heads, n_kv_heads=getattr(cfg, "n_key_value_heads", None)
                   or cfg.n_heads)
    subject = prompt_set.description
    return Result("attention-focusing", DEFINITION, metrics, {
        "by-head": heads_figure(per_head, subject), "by-layer": layers_figure(per_head, subject)})


def heads_figure(per_head: torch.Tensor, subject: str) -> go.Figure:
    L, H = per_head.shape
    fig = go.Figure(go.Heatmap(z=per_head.numpy(), x=[f"H{h}" for h in range(H)], y=[f"L{l}" for l in range(L)],
                               zmin=0, zmax=1, colorscale="Viridis", colorbar=dict(title="1 - H/log2 T"),
                               hovertemplate="layer %{y}, head %{x}<br>entropy reduction %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"{subject}: attention entropy reduction per head at the answer position",
                      xaxis_title="head", yaxis_title="layer", yaxis_autorange="reversed", 
                      width=200 + 40 * H, height=200 + 30 * L)
    return fig


def layers_figure(per_head: torch.Tensor, subject: str) -> go.Figure:
    layers = list(range(per_head.shape[0]))
    fig = go.Figure()
    fig.add_scatter(x=layers, y=per_head.mean(1).tolist(), mode="lines+markers", name="mean over heads",
                    hovertemplate="layer %{x}: %{y:.3f}<extra></extra>")
    fig.add_scatter(x=layers, y=per_head.min(1).values.tolist(), mode="lines", name="least focused head",
                    line=dict(dash="dot", color="gray"))
    fig.add_scatter(x=layers, y=per_head.max(1).values.tolist(), mode="lines", name="most focused head",
                    line=dict(dash="dash", color="gray"))
    fig.update_layout(title=f"{subject}: attention entropy reduction by layer (1 = one position, 0 = uniform)",
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
