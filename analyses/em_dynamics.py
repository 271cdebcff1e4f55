"""EM-like dynamics: does routing (the advantage spread) settle before precision (the value gradient)?

Paper II's explanation of the frame-precision dissociation, measured over a run's checkpoints.
The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import frame_precision, style
from .advantage_law import CHUNK, finish, float64_copy, measure
from .base import Analysis, Result, eval_batch, n_option, seed_option

DEFINITION = " ".join("""
 Every checkpoint of the model's run (as in frame-precision) is measured on one and the same
held-out batch of n sequences with advantage-law's decomposition (float64 copy, soft loss): per
checkpoint and layer, the routing signal is the mean over the layer's heads of the advantage spread
(attention-weighted standard deviation of b_ij = u_i . v_j over keys, u from each sequence's own
loss) and the precision signal is the mean over heads of the value-gradient norm (RMS over sequences
of |dL/dv|); the layer means of those over all layers are the model's two curves, with the score-
gradient norm beside them. In the paper's reading (attention weights as E-step responsibilities,
values as M-step prototypes), the routing signal falls to its floor early, once the advantages of
attended keys have equalised, while the value gradient stays non-zero as long as the upstream
gradient u is. Settling steps use frame-precision's rule on log10 of each curve (the first checkpoint
at which it has covered 90% of its change from the first checkpoint to the last); routing_settles_first
is true when the routing curve's settling step is strictly earlier than the precision curve's. The
ratio routing/precision at each checkpoint shows whether routing falls faster. Beside them, the
frame and precision settling steps of frame-precision on the same batch, so a reader sees whether
the gradient signals settle in the same order as the frame and the calibration do.
""".split())


def log10(values: list[float]) -> list[float]:
    return [math.log10(v) if v > 0 else -300.0 for v in values]


def compute(model, n: int = 64, seed: int = 1234, chunk: int = 32) -> Result:
    """The routing and precision signals of the gradient over every checkpoint of the model's run."""
    found = list(model.provenance.checkpoints)
    device = str(next(model.parameters()).device)
    batch = eval_batch(model, n, seed).double()
    steps, routing, precision, scores, per_layer = [], [], [], [], []
    for step, path in found:
        ckpt = float64_copy(model.provenance.load(path, device=device))
        frame_precision.check_same_model(ckpt, model, path)
        parts = [measure(ckpt, batch.rows(i, i + chunk), n) for i in range(0, n, chunk)]
        m = finish(parts, n)
        layer = {key: [sum(row) / len(row) for row in m[key]]
                 for key in ("advantage_spread", "value_grad_norm", "score_grad_norm")}
        steps.append(step)
        per_layer.append(layer)
        routing.append(sum(layer["advantage_spread"]) / len(layer["advantage_spread"]))
        precision.append(sum(layer["value_grad_norm"]) / len(layer["value_grad_norm"]))
        scores.append(sum(layer["score_grad_norm"]) / len(layer["score_grad_norm"]))
        del ckpt
    settle = dict(routing=frame_precision.settling_step(steps, log10(routing)),
                  precision=frame_precision.settling_step(steps, log10(precision)),
                  score_gradient=frame_precision.settling_step(steps, log10(scores)))
    geometry = frame_precision.compute(model, n=n, seed=seed).metrics
    metrics = dict(
        steps=steps, routing_signal=routing, precision_signal=precision, score_grad_norm=scores,
        routing_to_precision=[r / p if p > 0 else None for r, p in zip(routing, precision)],
        per_layer=per_layer, settling_steps=settle,
        routing_settles_first=settle["routing"] < settle["precision"],
        frame_settling_step=geometry["frame_settling_step"],
        calibration_settling_step=geometry["precision_settling_step"],
        frame_settles_first=geometry["frame_settles_first"],
        n=n, seed=seed, n_checkpoints=len(steps),
    )
    return Result("em-dynamics", DEFINITION, metrics, {"signals": signals_figure(metrics)}, descriptions={
        "routing_signal": "per checkpoint: mean advantage spread over layers and heads (E-step signal)",
        "precision_signal": "per checkpoint: mean RMS |dL/dv| over layers and heads (M-step signal)",
        "routing_settles_first": "routing's settling step is strictly earlier than precision's",
    })


def signals_figure(metrics: dict) -> go.Figure:
    steps = metrics["steps"]
    shown = [s if s > 0 else (min(x for x in steps if x > 0) / 2 if any(steps) else 1) for s in steps]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("gradient signals", "routing / precision"))
    for key, name, color in (("routing_signal", "routing (advantage spread)", "#1f77b4"),
                             ("precision_signal", "precision (value gradient)", "#d62728"),
                             ("score_grad_norm", "score gradient", "#7f7f7f")):
        fig.add_scatter(x=shown, y=metrics[key], mode="lines+markers", name=name, line_color=color,
                        customdata=steps, hovertemplate="step %{customdata}: %{y:.3g}<extra></extra>", row=1, col=1)
    fig.add_scatter(x=shown, y=metrics["routing_to_precision"], mode="lines+markers", name="ratio",
                    line_color="#2ca02c", showlegend=False, row=1, col=2)
    fig.update_xaxes(type="log", title_text="training step (log; step 0 at half the first)")
    fig.update_yaxes(type="log")
    for height, (label, step, dash) in zip((1.0, 0.9), (("frame settles", metrics["frame_settling_step"], "dash"),
                                                      ("calibration settles", metrics["calibration_settling_step"],
                                                       "dot"))):
        if step is not None:  # on the signals panel; the two labels one above the other, as the lines may be close
            fig.add_vline(x=shown[steps.index(step)], line_dash=dash, line_color="gray", row=1, col=1)
            style.label(fig, "gray", text=f"{label} ({step})", y=height, yref="y domain",
                         x=math.log10(shown[steps.index(step)]), xref="x", xanchor="right", yanchor="top")
    fig.update_yaxes(title_text="layer-mean signal (log)", row=1, col=1)
    fig.update_yaxes(title_text="routing / precision (log)", row=1, col=2)
    fig.update_layout(title="Routing against precision signals of the gradient over training",
                      width=1000, height=460)
    return fig


ANALYSIS = Analysis(
    "em-dynamics", "routing (advantage spread) vs precision (value gradient) signals over a run's checkpoints "
    "(Paper II)", DEFINITION, compute,
    options=(n_option(64), seed_option(), CHUNK),
    requires=("attention", "series"), order=21)
