"""EM-like dynamics: does routing (the advantage spread) settle before precision (the value gradient)?

Paper II's explanation of the frame-precision dissociation, measured over a run's checkpoints.
The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from . import frame_precision, style
from .advantage_law import CHUNK, finish, float64_copy, measure, per_sequence_columns, signals_of_sums
from .base import Analysis, Result, eval_batch, n_option, seed_option
from .intervals import bootstrap_sums

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
the gradient signals settle in the same order as the frame and the calibration do. Uncertainty: every
checkpoint is measured on the same sequences, so one bootstrap resample of the sequences (2,000, whole
sequences, no new backward pass) gives a whole resampled curve: each curve point has a 95% percentile interval
(the bands of the figure), each settling step an interval (the resampled settling steps' 2.5th and 97.5th
percentiles, rounded outward to checkpoint steps), and routing_settles_first_share is the fraction of resamples
in which routing settles strictly first. The frame and calibration settling steps are frame-precision's, with
the uncertainty that analysis gives them.
""".split())

CURVES = (("routing_signal", "advantage_spread"), ("precision_signal", "value_grad_norm"),
          ("score_grad_norm", "score_grad_norm"))  # (this analysis's curve, advantage-law's model-mean number)


def log10(values: list[float]) -> list[float]:
    return [math.log10(v) if v > 0 else -300.0 for v in values]


def on_checkpoint_grid(steps: list[int], low: float, high: float) -> list[int] | None:
    """[low, high] widened to the checkpoint steps that enclose it (a percentile may fall between two checkpoints);
    None when some resample had no settling step (a curve with a missing value)."""
    if math.isnan(low) or math.isnan(high):
        return None
    return [max((s for s in steps if s <= low + 1e-9), default=steps[0]),
            min((s for s in steps if s >= high - 1e-9), default=steps[-1])]


def curve_intervals(columns: torch.Tensor, steps: list[int], positions: int, groups: list[str]) -> dict:
    """95% bootstrap intervals over sequences of the curves, their ratio and settling steps, from ``columns``
    [n, checkpoints, K, L, H] (each checkpoint's ``per_sequence_columns`` on the same sequences): every resample
    of the sequences is a resample of every checkpoint at once."""
    n, share = len(columns), {}

    def statistic(sums):
        signals = signals_of_sums(sums.reshape(len(sums), *columns.shape[1:]), n, positions, groups)
        curves = {name: signals[f"model_mean_{key}"] for name, key in CURVES}  # [resamples, checkpoints] each
        settle = torch.tensor([[math.nan if step is None else float(step) for step in
                                (frame_precision.settling_step(steps, log10(row.tolist())) for row in curve)]
                               for curve in curves.values()], dtype=torch.float64).T  # step 0 is a step, None is not
        share["routing_first"] = float((settle[:, 0] < settle[:, 1]).double().mean())
        return torch.cat([*curves.values(), curves["routing_signal"] / curves["precision_signal"], settle], 1)

    bounds, C = bootstrap_sums(columns, statistic), len(steps)
    out = {name: bounds[i * C:(i + 1) * C] for i, (name, _) in enumerate(CURVES)}
    out["routing_to_precision"] = bounds[3 * C:4 * C]
    out["settling_steps"] = {key: on_checkpoint_grid(steps, *bounds[4 * C + i])
                             for i, key in enumerate(("routing", "precision", "score_gradient"))}
    return out, share["routing_first"]


def compute(model, n: int = 64, seed: int = 1234, chunk: int = 32) -> Result:
    """The routing and precision signals of the gradient over every checkpoint of the model's run."""
    found = list(model.provenance.checkpoints)
    device = str(next(model.parameters()).device)
    batch = eval_batch(model, n, seed).double()
    steps, routing, precision, scores, per_layer, columns = [], [], [], [], [], []
    for step, path in found:
        ckpt = float64_copy(model.provenance.load(path, device=device))
        frame_precision.check_same_model(ckpt, model, path)
        parts = [measure(ckpt, batch.rows(i, i + chunk), n) for i in range(0, n, chunk)]
        m = finish(parts, n)
        columns.append(per_sequence_columns(parts))
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
    intervals, routing_first_share = curve_intervals(torch.stack(columns, 1), steps, parts[0]["positions"],
                                                     list(m["gradient_share"]))
    geometry = frame_precision.compute(model, n=n, seed=seed).metrics
    metrics = dict(
        steps=steps, routing_signal=routing, precision_signal=precision, score_grad_norm=scores,
        routing_to_precision=[r / p if p > 0 else None for r, p in zip(routing, precision)],
        per_layer=per_layer, settling_steps=settle,
        routing_settles_first=settle["routing"] < settle["precision"],
        routing_settles_first_share=routing_first_share, intervals=intervals,
        frame_settling_step=geometry["frame_settling_step"],
        calibration_settling_step=geometry["precision_settling_step"],
        frame_settles_first=geometry["frame_settles_first"],
        n=n, n_sequences=n, seed=seed, n_checkpoints=len(steps),
    )
    return Result("em-dynamics", DEFINITION, metrics, {"signals": signals_figure(metrics)}, descriptions={
        "routing_signal": "per checkpoint: mean advantage spread over layers and heads (E-step signal)",
        "precision_signal": "per checkpoint: mean RMS |dL/dv| over layers and heads (M-step signal)",
        "routing_settles_first": "routing's settling step is strictly earlier than precision's",
        "routing_settles_first_share": "the fraction of 2,000 bootstrap resamples of the sequences in which routing "
                                       "settles strictly first (how firmly the batch supports routing_settles_first)",
        "intervals": "95% percentile bootstrap intervals, resampling whole sequences of the one batch (n_sequences; "
                     "2,000 resamples, every checkpoint resampled alike): per checkpoint of each curve and of "
                     "routing_to_precision, and of each settling step (rounded outward to checkpoint steps)",
    })


def signals_figure(metrics: dict) -> go.Figure:
    steps = metrics["steps"]
    shown = [s if s > 0 else (min(x for x in steps if x > 0) / 2 if any(steps) else 1) for s in steps]
    # room between the panels for the right one's axis title
    fig = make_subplots(rows=1, cols=2, subplot_titles=("gradient signals", "routing / precision"),
                        horizontal_spacing=0.14)
    bounds = metrics.get("intervals")  # none in a record from before the intervals
    for key, name, color in (("routing_signal", "routing (advantage spread)", "#1f77b4"),
                             ("precision_signal", "precision (value gradient)", "#d62728"),
                             ("score_grad_norm", "score gradient", "#9467bd")):
        if bounds:
            style.interval_band(fig, shown, bounds[key], color, group=name, row=1, col=1)
        fig.add_scatter(x=shown, y=metrics[key], mode="lines+markers", name=name, line_color=color, legendgroup=name,
                        customdata=steps, hovertemplate="step %{customdata}: %{y:.3g}<extra></extra>", row=1, col=1)
    if bounds:
        style.interval_band(fig, shown, bounds["routing_to_precision"], "#2ca02c", row=1, col=2)
    fig.add_scatter(x=shown, y=metrics["routing_to_precision"], mode="lines+markers", name="ratio",
                    line_color="#2ca02c", showlegend=False, row=1, col=2)
    # a short axis title under each panel (a long one ran into the other panel's); step 0's place in the subtitle
    # ticks that fit a half-width panel unrotated: 1, 2, 5 x 10^k over two decades at most, else 1 and 3 x 10^k
    low, high = math.floor(math.log10(min(shown))), math.ceil(math.log10(max(shown)))
    fine = math.log10(max(shown) / min(shown)) <= 2
    ticks = [m * 10 ** k for k in range(low, high + 1) for m in ((1, 2, 5) if fine else (1, 3))
             if min(shown) <= m * 10 ** k <= max(shown)]
    fig.update_xaxes(type="log", title_text="training step (log)", tickmode="array", tickvals=ticks,
                     ticktext=[style.number_text(t) for t in ticks])
    fig.update_yaxes(type="log")
    for label, step, dash in (("frame settles", metrics["frame_settling_step"], "dash"),
                              ("calibration settles", metrics["calibration_settling_step"], "dot")):
        if step is not None:  # on the signals panel, named in the legend (a label on the panel covered its curves)
            fig.add_vline(x=shown[steps.index(step)], line_dash=dash, line_color="gray", row=1, col=1)
            fig.add_scatter(x=[None], y=[None], mode="lines", name=f"{label} (step {step})", hoverinfo="skip",
                            line=dict(color="gray", dash=dash), row=1, col=1)
    fig.update_yaxes(title_text="layer-mean signal (log)", row=1, col=1)
    fig.update_yaxes(title_text="routing / precision (log)", row=1, col=2)
    notes = ([f"step 0 drawn at {shown[0]:g}"] if steps and steps[0] == 0 else []) + (
        [f"bands: 95% bootstrap intervals over the {metrics['n_sequences']:,} sequences (the same at every checkpoint)"]
        if bounds else [])
    fig.update_layout(title="Routing against precision signals of the gradient over training"
                            + (f"<br><sup>{'; '.join(notes)}</sup>" if notes else ""),
                      width=1000, height=460)
    return fig


ANALYSIS = Analysis(
    "em-dynamics", "routing (advantage spread) vs precision (value gradient) signals over a run's checkpoints "
    "(Paper II)", DEFINITION, compute,
    options=(n_option(64), seed_option(), CHUNK),
    requires=("attention", "series"), order=21)
