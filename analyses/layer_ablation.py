"""Layer ablation: does calibration need every layer?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import plotly.graph_objects as go


from . import style
from .activations import needed_hooks, part_hooks
from .base import Analysis, AnalysisError, Result, eval_batch, n_option, seed_option
from .calibration import measure, ratio_interval

DEFINITION = " ".join("""
 Calibration is measured as in ``calibration`` (entropy MAE in bits over the answer
classes and KL(Bayes||model) in bits, averaged over query positions; differential entropies and
Gaussian KL for a continuous task) on one held-out batch of n sequences, for the intact model and
with one block l removed at a time, three ways: block skipped (the block's output residual stream
blocks.l.hook_resid_post is replaced by its input blocks.l.hook_resid_pre from the same forward
pass, so the block is an identity), attention only skipped (blocks.l.hook_attn_out set to 0, which
also removes the attention bias b_O), and MLP only skipped (blocks.l.hook_mlp_out set to 0, which
also removes b_out). Skipping the block is the same as skipping both its attention and its MLP.
Every later block still runs, on the altered residual stream. Reported per layer and way: MAE, KL
and the MAE ratio MAE(ablated) / MAE(intact), with its 95% paired bootstrap interval over sequences
(mae_ratio_interval). The paper claims that removing any single layer
raises MAE more than 10x; min_block_ratio is the smallest block-skip ratio over layers and
all_blocks_over_10x says whether every block-skip ratio exceeds 10. No reference script computed
this number.
""".split())

PARTS = {"block": "whole block", "attention_only": "attention only", "mlp_only": "MLP only"}
CLAIMED_RATIO = 10.0


def measure_with(model, batch, hooks: list, sums: dict | None = None) -> dict:
    with model.hooks(fwd_hooks=hooks):
        return measure(model, batch, sums=sums)


def compute(model, n: int = 1000, seed: int = 1234) -> Result:
    """Calibration of ``model`` with each block, its attention, or its MLP skipped, against the intact model."""
    hook_dict = getattr(model, "hook_dict", None)
    n_layers = getattr(getattr(model, "cfg", None), "n_layers", None)
    if hook_dict is None or not n_layers:
        raise AnalysisError(f"layer-ablation needs a hooked model with blocks.<l>.hook_resid_pre/post hook points; "
                            f"{getattr(model, 'arch', type(model).__name__)} has none")
    # Skipping a whole block needs only the residual-stream hooks (any layered architecture has
    # them); the attention-only and MLP-only parts are measured where the block has those outputs.
    available = {part: [all(name in hook_dict for name in needed_hooks(part, l)) for l in range(n_layers)]
                 for part in PARTS}
    missing = [name for l in range(n_layers) for name in needed_hooks("block", l) if name not in hook_dict]
    if missing:
        raise AnalysisError(f"layer-ablation needs the hook point(s) {', '.join(missing)}, which this model lacks")

    batch = eval_batch(model, n, seed)
    intact_sums = {}
    intact = measure(model, batch, sums=intact_sums)
    mae0, kl0 = intact["entropy_mae_bits"], intact["kl_bits"]
    metrics = {"intact": dict(entropy_mae_bits=mae0, kl_bits=kl0), "n_layers": n_layers,
               "n_sequences": len(batch), "seed": seed}
    for part in PARTS:
        rows = dict(entropy_mae_bits=[], kl_bits=[], mae_ratio=[], mae_ratio_interval=[])
        for l in range(n_layers):
            sums = {}
            m = measure_with(model, batch, part_hooks(part, l), sums) if available[part][l] else None
            rows["mae_ratio_interval"].append(None if m is None else ratio_interval(sums, intact_sums))
            rows["entropy_mae_bits"].append(None if m is None else m["entropy_mae_bits"])
            rows["kl_bits"].append(None if m is None else m["kl_bits"])
            rows["mae_ratio"].append(None if m is None or mae0 <= 0 else m["entropy_mae_bits"] / mae0)
        metrics[part] = rows

    ratios = metrics["block"]["mae_ratio"]
    defined = None not in ratios  # undefined only when the intact model is exact (MAE 0)
    metrics["min_block_ratio"] = min(ratios) if defined else None
    metrics["all_blocks_over_10x"] = all(r > CLAIMED_RATIO for r in ratios) if defined else None
    return Result("layer-ablation", DEFINITION, metrics, {"mae-ratio": bar_figure(metrics, model.task.name)})


def bar_figure(metrics: dict, task_name: str) -> go.Figure:
    layers = [f"layer {l}" for l in range(metrics["n_layers"])]
    fig = go.Figure()
    for part, label in PARTS.items():
        rows = metrics[part]
        fig.add_bar(x=layers, y=rows["mae_ratio"], name=label,
                    customdata=[(m if m is not None else float("nan"), k if k is not None else float("nan"))
                                for m, k in zip(rows["entropy_mae_bits"], rows["kl_bits"])],
                    hovertemplate=f"%{{x}}, {label} skipped<br>MAE ratio %{{y:.3g}}×"
                                  "<br>MAE %{customdata[0]:.4g} bits<br>KL %{customdata[1]:.4g} bits<extra></extra>")
    fig.update_layout(title=f"{task_name}: entropy MAE with one layer part skipped, relative to the intact model<br>"
                            f"<sup>intact MAE {metrics['intact']['entropy_mae_bits']:.4g} bits</sup>",
                      barmode="group", xaxis_title="layer", yaxis_title="MAE ratio to intact (log scale)",
                      yaxis_type="log", width=760, height=460)
    style.reference_line(fig, CLAIMED_RATIO, "10× (paper's claim)")
    style.reference_line(fig, 1, "intact", dash="dot")
    return fig


ANALYSIS = Analysis("layer-ablation", "calibration with each block, its attention or its MLP skipped",
                    DEFINITION, compute, options=(n_option(1000), seed_option()), order=4)
