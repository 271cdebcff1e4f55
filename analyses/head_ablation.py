"""Head ablation: how much does calibration depend on each single attention head?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch


from .activations import ablation_hook, mean_z, z_hook_name
from .base import Analysis, AnalysisError, Result, eval_batch, n_option, seed_option
from .calibration import measure, ratio_interval

DEFINITION = " ".join("""
 Calibration is measured as in ``calibration`` (entropy MAE in bits over the answer
classes and KL(Bayes||model) in bits, averaged over query positions; differential entropies and
Gaussian KL for a continuous task) on one held-out batch of n sequences, first for the intact model
and then with exactly one head ablated at a time. A head is ablated at its output z (the attention-
weighted values, blocks.l.attn.hook_z, [batch, pos, head, d_head]), before W_O, so nothing else in
the layer changes and the shared bias b_O stays. Zero ablation sets the head's z to 0 at every
position. Mean ablation replaces the head's z at every position by its mean over all sequences and
all positions of the same evaluation batch, taken from an intact forward pass. For each layer l,
head h and kind: MAE, KL, delta MAE = MAE(ablated) - MAE(intact), and MAE ratio = MAE(ablated) /
MAE(intact), with its 95% paired bootstrap interval over sequences (mae_ratio_interval; the same
sequences resampled for both). The hypothesis-frame head is the layer-0 head with the largest delta MAE under zero
ablation; its dominance is its delta MAE divided by that of the second most damaging layer-0 head
(top/second; 1 means two equally important heads, reported only when the second delta is positive).
The reference implementation used zero ablation only.
""".split())

KINDS = ("zero", "mean")


def measure_ablated(model, batch, layer: int, head: int, replacement: torch.Tensor | None,
                    sums: dict | None = None) -> dict:
    with model.hooks(fwd_hooks=[(z_hook_name(layer), ablation_hook(head, replacement))]):
        return measure(model, batch, sums=sums)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None



def compute(model, n: int = 1000, seed: int = 1234) -> Result:
    """Calibration of ``model`` with each single head zero- and mean-ablated, against the intact model."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    missing = [z_hook_name(l) for l in range(n_layers) if z_hook_name(l) not in model.hook_dict]
    if missing:
        raise AnalysisError(f"head-ablation needs the hook point(s) {', '.join(missing)}, which this model lacks")
    batch = eval_batch(model, n, seed)
    intact_sums = {}
    intact = measure(model, batch, sums=intact_sums)
    mae0, kl0 = intact["entropy_mae_bits"], intact["kl_bits"]
    means = mean_z(model, batch.tokens)

    metrics = {"intact": dict(entropy_mae_bits=mae0, kl_bits=kl0), "n_layers": n_layers, "n_heads": n_heads,
               "n_sequences": len(batch), "seed": seed}
    for kind in KINDS:
        table = {key: [[None] * n_heads for _ in range(n_layers)]
                 for key in ("entropy_mae_bits", "kl_bits", "delta_mae_bits", "delta_kl_bits", "mae_ratio",
                             "mae_ratio_interval")}
        for l in range(n_layers):
            for h in range(n_heads):
                sums = {}
                m = measure_ablated(model, batch, l, h, None if kind == "zero" else means[l][h], sums)
                table["mae_ratio_interval"][l][h] = ratio_interval(sums, intact_sums)
                mae, kl = m["entropy_mae_bits"], m["kl_bits"]
                table["entropy_mae_bits"][l][h], table["kl_bits"][l][h] = mae, kl
                table["delta_mae_bits"][l][h], table["delta_kl_bits"][l][h] = mae - mae0, kl - kl0
                table["mae_ratio"][l][h] = _ratio(mae, mae0)
        metrics[kind] = table

    # The paper's "hypothesis-frame head": the one layer-0 head whose removal hurts most. Ranking by
    # delta MAE under zero ablation follows the reference implementation.
    deltas = metrics["zero"]["delta_mae_bits"][0]
    order = sorted(range(n_heads), key=lambda h: deltas[h], reverse=True)
    top = order[0]
    second = order[1] if n_heads > 1 else None
    metrics["hypothesis_frame_head"] = dict(
        layer=0, head=top, delta_mae_bits=deltas[top],
        mae_ratio_to_intact=metrics["zero"]["mae_ratio"][0][top],
        second_head=second, second_delta_mae_bits=None if second is None else deltas[second],
        # top/second is only meaningful when the second head also hurts (a positive denominator)
        top_to_second_ratio=None if second is None else _ratio(deltas[top], deltas[second]),
    )
    span = doubling_span([metrics[kind] for kind in KINDS])  # one colour scale for both pages, so they compare
    return Result("head-ablation", DEFINITION, metrics, {
        f"{kind}-ablation": heatmap_figure(metrics[kind], kind, mae0, model.task.name, span, len(batch))
        for kind in KINDS})


def ratios(table: dict) -> np.ndarray:
    return np.array([[math.nan if r is None else r for r in row] for row in table["mae_ratio"]], dtype=float)


def doubling_span(tables: list[dict]) -> int:
    """The colour scale's half-width in doublings: the largest |log2 ratio| of any of ``tables``, at least 1."""
    doublings = np.concatenate([np.log2(ratios(table)).ravel() for table in tables])
    finite = np.abs(doublings[np.isfinite(doublings)])
    return max(1, math.ceil(finite.max())) if finite.size else 1


def heatmap_figure(table: dict, kind: str, intact_mae: float, task_name: str, span: int | None = None,
                   n_sequences: int | None = None) -> go.Figure:
    """The MAE ratio ablated / intact per head (the paper's criterion), coloured on a log2 scale around 1,
    +-``span`` doublings (default: this table's own)."""
    n_layers, n_heads = len(table["mae_ratio"]), len(table["mae_ratio"][0])
    ratio = ratios(table)
    doublings = np.log2(ratio)
    span = span or doubling_span([table])
    step = math.ceil(span / 4)
    ticks = list(range(-(span // step) * step, span + 1, step))  # through 0 (ratio 1)
    interval = lambda l, h: ("{:.3g}-{:.3g}×".format(*table["mae_ratio_interval"][l][h])
                             if (table.get("mae_ratio_interval") or [[None] * n_heads] * n_layers)[l][h] else "–")
    custom = [[(table["delta_mae_bits"][l][h], table["entropy_mae_bits"][l][h], table["kl_bits"][l][h], interval(l, h))
               for h in range(n_heads)] for l in range(n_layers)]
    fig = go.Figure(go.Heatmap(
        z=doublings, text=ratio, x=[f"H{h}" for h in range(n_heads)], y=[f"L{l}" for l in range(n_layers)],
        colorscale="RdBu_r", zmid=0, zmin=-span, zmax=span, customdata=custom, texttemplate="%{text:.3g}×",
        colorbar=dict(title="ablated / intact", tickvals=ticks, ticktext=[f"{2.0 ** t:.2g}×" for t in ticks]),
        hovertemplate="layer %{y}, head %{x}<br>MAE ratio to intact %{text:.3g}× (95% %{customdata[3]})<br>ΔMAE %{customdata[0]:.3g} bits"
                      "<br>MAE %{customdata[1]:.4g} bits<br>KL %{customdata[2]:.4g} bits<extra></extra>"))
    what = "set to 0" if kind == "zero" else "replaced by its mean over all sequences and positions"
    fig.update_layout(title=f"{task_name}: entropy MAE with one head's output {what}, relative to the intact model"
                            f"<br><sup>MAE ratio ablated / intact; {kind} ablation, intact MAE "
                            f"{intact_mae:.4g} bits" + (f", {n_sequences:,} sequences" if n_sequences else "") + "</sup>",
                      xaxis_title="head", yaxis_title="layer", yaxis_autorange="reversed",
                      width=200 + 90 * max(n_heads, 4), height=200 + 70 * max(n_layers, 2))
    return fig


ANALYSIS = Analysis("head-ablation", "calibration with each attention head zeroed or mean-ablated, against the "
                    "intact model", DEFINITION, compute, options=(n_option(1000), seed_option()),
                    requires=("attention",), order=3)
