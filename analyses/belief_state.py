"""Belief state: how linearly the residual stream encodes the full Bayes posterior, layer by layer.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from .base import Analysis, AnalysisError, Result, eval_batch, n_option, seed_option, untrained_twin
from .belief_clusters import PALETTE, residuals_at_queries, resid_name
from .intervals import bootstrap_sums
from .style import error_bars

DEFINITION = " ".join("""
 On one held-out batch of n sequences, the residual stream after every block l
(blocks.l.hook_resid_post) is read at the query positions. The target at each point is the exact
Bayes belief there: the full posterior vector over the C answer classes for a discrete task (e.g.
the HMM's filtering distribution over hidden states), the belief over the hidden states for a task
that gives one beside its answers (a process such as Mess3 or RRXOR, whose next-token answer is a
linear image of that belief, lossy for RRXOR), or (mean, log variance) of the Gaussian predictive for
a continuous one. The sequences are split at random (seeded) into halves; on the
first half a ridge regression (features standardised, an intercept, penalty lambda = 1e-3 times the
number of training points) maps each layer's residual to the target; on the second half it is
scored. r2: 1 - sum of squared errors / sum of squares about the held-out mean, pooled over all
target coordinates (1: the belief is a linear read-out; 0: no better than the mean belief).
rmse: the root-mean-square error over all held-out coordinates. Controls per layer: the untrained
twin (same architecture, config and seed at initialisation) under the same procedure, and a
shuffled-belief control that fits the trained residuals to the training targets randomly permuted
across points (an r2 near or below 0 says the fit is not capacity alone). The same fit from every
layer's residual concatenated (``concat``) reads a belief spread across layers that no one layer
holds. The headline numbers are those of the final layer. The simplex figure (discrete tasks) places class c at the c-th vertex of
a regular polygon and each belief p at sum_c p_c vertex_c, for the Bayes beliefs and the final
layer's read-out of the same held-out points; the simplex-by-layer figure draws the Bayes beliefs
beside every layer's read-out and the concatenation's, each point coloured by its Bayes belief (the
vertices' colours mixed), so a read-out that keeps the belief's nested structure keeps its colours
in place. Uncertainty: each r2 and rmse (per layer, trained, untrained and
shuffled) has a 95% percentile bootstrap interval over the held-out sequences (2,000 resamples of whole
sequences, each read-out kept as fitted: the interval is the noise of the scoring half, not of the fit), the
sum of squares taken about each resample's own mean belief. best_layer is the arg-max of the per-layer r2, a
choice rather than a sample statistic: read it against the per-layer intervals.
""".split())

RIDGE = 1e-3
SIMPLEX_POINTS = 2000


def beliefs_at_queries(batch) -> np.ndarray:
    """The Bayes belief at each query position, row-major (sequence, position): [N, C] or [N, 2]; [N, S] over the
    hidden states for a task that gives that belief beside its answers (``hypothesis["belief"]``, a process)."""
    mask = batch.query_mask.cpu()
    if "belief" in batch.hypothesis:
        return batch.hypothesis["belief"].cpu()[mask].double().numpy()
    if batch.posterior is not None:
        return batch.posterior.cpu()[mask].double().numpy()
    mean, var = batch.posterior_mean.cpu()[mask].double(), batch.posterior_var.cpu()[mask].double()
    return torch.stack([mean, var.log()], -1).numpy()


def ridge_fit(x: np.ndarray, y: np.ndarray, penalty: float = RIDGE):
    """A linear map with intercept from standardised ``x`` to ``y``; returns predict(x_new)."""
    mu, sd = x.mean(0), x.std(0) + 1e-12
    z = np.hstack([(x - mu) / sd, np.ones((len(x), 1))])
    gram = z.T @ z + penalty * len(x) * np.diag([1.0] * x.shape[1] + [0.0])  # the intercept is not penalised
    w = np.linalg.solve(gram, z.T @ y)
    return lambda new: np.hstack([(new - mu) / sd, np.ones((len(new), 1))]) @ w


def held_out_scores(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray,
                    fit_targets: np.ndarray | None = None) -> tuple[float, float, np.ndarray]:
    """(r2, rmse, held-out predictions) of a ridge fit on ``train`` (to ``fit_targets`` if given)."""
    predict = ridge_fit(x[train], y[train] if fit_targets is None else fit_targets)
    prediction = predict(x[test])
    residual = ((prediction - y[test]) ** 2).sum()
    total = ((y[test] - y[test].mean(0)) ** 2).sum()  # 0 when every held-out belief is the same: no R²
    return float(1 - residual / total) if total > 0 else float("nan"), float(math.sqrt(residual / y[test].size)), prediction


def point_owners(batch) -> np.ndarray:
    """The sequence each query point (row of ``beliefs_at_queries``) belongs to."""
    per_sequence = batch.query_mask.cpu().sum(1).numpy()
    return np.repeat(np.arange(len(per_sequence)), per_sequence)


def split_points(batch, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Point indices of a random half of the sequences (train) and of the other half (test)."""
    per_sequence = batch.query_mask.cpu().sum(1).numpy()
    owner = point_owners(batch)
    order = np.random.default_rng(seed).permutation(len(per_sequence))
    in_train = np.zeros(len(per_sequence), bool)
    in_train[order[: len(order) // 2]] = True
    return np.flatnonzero(in_train[owner]), np.flatnonzero(~in_train[owner])


def scores_of_sums(sums: torch.Tensor, n_fits: int, dim: int) -> torch.Tensor:
    """[r2 of each fit, rmse of each fit], [..., 2 * n_fits], from held-out sums laid out as ``score_columns``'s."""
    sq_error, points, sq, total = sums[..., :n_fits], sums[..., n_fits], sums[..., n_fits + 1], sums[..., n_fits + 2:]
    about_mean = sq - (total ** 2).sum(-1) / points  # the sum of squares about this (re)sample's own mean belief
    return torch.cat([1 - sq_error / about_mean[..., None], (sq_error / (points * dim)[..., None]).sqrt()], -1)


def score_columns(y: np.ndarray, predictions: list[np.ndarray], owner: np.ndarray) -> torch.Tensor:
    """Per held-out sequence (``owner``: each held-out point's sequence) the sums r2 and rmse are made of: each
    prediction's squared error, then the number of points, the target's sum of squares and its per-coordinate sums."""
    rows = np.unique(owner, return_inverse=True)[1]
    per_point = np.hstack([((p - y) ** 2).sum(1, keepdims=True) for p in predictions]
                          + [np.ones((len(y), 1)), (y ** 2).sum(1, keepdims=True), y])
    sums = np.zeros((rows.max() + 1, per_point.shape[1]))
    np.add.at(sums, rows, per_point)
    return torch.from_numpy(sums)


def score_intervals(y: np.ndarray, predictions: list[np.ndarray], owner: np.ndarray) -> list[tuple[list, list]]:
    """(r2 interval, rmse interval) of each of ``predictions`` of the held-out ``y``: a 95% bootstrap over the
    held-out sequences, the predictions kept as they are (no refit per resample)."""
    k = len(predictions)
    bounds = bootstrap_sums(score_columns(y, predictions, owner), lambda sums: scores_of_sums(sums, k, y.shape[1]))
    return list(zip(bounds[:k], bounds[k:]))


@dataclass
class ReadOut:
    """What ``read_out`` measured: the metrics, and the held-out points' beliefs with each fit's read-out of them."""

    metrics: dict
    beliefs: np.ndarray  # [held-out points, target dim] the Bayes beliefs (the test half)
    layers: list[np.ndarray]  # per layer: the trained model's read-out of those points
    concat: np.ndarray  # the read-out from every layer concatenated
    vertices: list[str]  # names of the belief's coordinates (hidden states, or classes c0, c1, ...)
    simplex: bool  # whether the beliefs are distributions over 3 or more classes (drawn on a simplex)


def read_out(model, n: int = 500, seed: int = 1234) -> ReadOut:
    """Held-out linear read-out of the Bayes belief from each layer's residual stream (and from all of them
    concatenated), with controls; the same n and seed give every model of a task the same held-out points."""
    n_layers = model.cfg.n_layers
    missing = [resid_name(l) for l in range(n_layers) if resid_name(l) not in getattr(model, "hook_dict", {})]
    if missing:
        raise AnalysisError(f"belief-state needs the hook point(s) {', '.join(missing)}, which this model lacks")
    if n < 4:
        raise AnalysisError("belief-state needs at least 4 sequences to fit on half and score on the other (raise --n)")
    batch = eval_batch(model, n, seed)
    target = beliefs_at_queries(batch)
    train, test = split_points(batch, seed)
    shuffled = target[train][np.random.default_rng(seed + 1).permutation(len(train))]
    trained, untrained = residuals_at_queries(model, batch), residuals_at_queries(untrained_twin(model), batch)
    per = dict(r2=[], rmse=[], untrained_r2=[], untrained_rmse=[], shuffled_r2=[])
    predictions = []  # per layer: the trained, untrained and shuffled read-outs of the held-out points
    for layer in range(n_layers):
        r2, rmse, prediction = held_out_scores(trained[layer], target, train, test)
        per["r2"].append(r2)
        per["rmse"].append(rmse)
        r2_u, rmse_u, prediction_u = held_out_scores(untrained[layer], target, train, test)
        per["untrained_r2"].append(r2_u)
        per["untrained_rmse"].append(rmse_u)
        r2_s, _, prediction_s = held_out_scores(trained[layer], target, train, test, fit_targets=shuffled)
        per["shuffled_r2"].append(r2_s)
        predictions += [prediction, prediction_u, prediction_s]
    # Every layer's residual side by side: a belief spread across the layers (Shai et al.'s RRXOR) is read from
    # the concatenation although no one layer holds it.
    concat = {}
    for fit, stream, targets in (("", trained, None), ("untrained_", untrained, None), ("shuffled_", trained, shuffled)):
        r2_c, rmse_c, prediction_c = held_out_scores(np.hstack(stream), target, train, test, fit_targets=targets)
        concat[f"{fit}r2"] = r2_c
        if fit != "shuffled_":
            concat[f"{fit}rmse"] = rmse_c
        predictions.append(prediction_c)
        if fit == "":
            concat_prediction = prediction_c
    bounds = score_intervals(target[test], predictions, point_owners(batch)[test])
    for i, fit in enumerate(("", "untrained_", "shuffled_")):
        per[f"{fit}r2_interval"] = [bounds[3 * l + i][0] for l in range(n_layers)]
        if fit != "shuffled_":
            per[f"{fit}rmse_interval"] = [bounds[3 * l + i][1] for l in range(n_layers)]
        concat[f"{fit}r2_interval"] = bounds[3 * n_layers + i][0]
        if fit != "shuffled_":
            concat[f"{fit}rmse_interval"] = bounds[3 * n_layers + i][1]
    metrics = dict(r2=per["r2"][-1], rmse=per["rmse"][-1], untrained_r2=per["untrained_r2"][-1],
                   shuffled_r2=per["shuffled_r2"][-1], best_layer=int(np.nanargmax(per["r2"])) if not np.isnan(per["r2"]).all() else None,
                   per_layer=dict(layer=list(range(n_layers)), hook=[resid_name(l) for l in range(n_layers)], **per),
                   concat=concat, target=target_name(model.task, batch),
                   target_dim=int(target.shape[1]), n_train_points=len(train), n_test_points=len(test),
                   n_sequences=len(batch), n_test_sequences=len(np.unique(point_owners(batch)[test])), seed=seed)
    metrics["intervals"] = {key: per[f"{key}_interval"][-1] for key in ("r2", "rmse", "untrained_r2", "shuffled_r2")}
    return ReadOut(metrics, target[test], [predictions[3 * l] for l in range(n_layers)], concat_prediction,
                   vertex_names(model.task, batch, target.shape[1]), batch.posterior is not None and target.shape[1] >= 3)


def compute(model, n: int = 500, seed: int = 1234) -> Result:
    """Held-out linear read-out of the Bayes belief from each layer's residual stream, with controls."""
    fit = read_out(model, n, seed)
    metrics = fit.metrics
    figures = {"per-layer": per_layer_figure(metrics)}
    if fit.simplex:
        figures["simplex"] = simplex_figure(fit.beliefs, fit.layers[-1], seed)
        labels = [f"L{l}" for l in metrics["per_layer"]["layer"]] + ["all layers"]
        figures["simplex-by-layer"] = layered_simplex_figure(fit.beliefs, fit.layers + [fit.concat], labels,
                                                             metrics["per_layer"]["r2"] + [metrics["concat"]["r2"]],
                                                             metrics["target"], seed, fit.vertices)
    return Result("belief-state", DEFINITION, metrics, figures, descriptions={
        "r2": "final layer: held-out R^2 of the linear read-out of the Bayes belief (1 = exact, 0 = the mean belief)",
        "rmse": "final layer: held-out root-mean-square error of that read-out",
        "untrained_r2": "the same read-out from the untrained twin's final layer (what the architecture alone gives)",
        "shuffled_r2": "the same read-out fitted to shuffled beliefs (what fitting capacity alone gives)",
        "intervals": "95% percentile bootstrap interval of r2, rmse, untrained_r2 and shuffled_r2, resampling whole "
                     "held-out sequences (n_test_sequences of them, n_test_points queries; 2,000 resamples) with each "
                     "read-out kept as fitted: the noise of the scoring half; per layer in per_layer's *_interval",
        "concat": "the same read-out from every layer's residual concatenated (r2, rmse and the controls, with "
                  "their intervals): a belief spread across layers is read here although no one layer holds it",
        "best_layer": "the layer of largest r2: a choice, not a sample statistic (read it against the per-layer "
                      "intervals)",
    })


def target_name(task, batch) -> str:
    """What the read-out's target is, in words (``metrics["target"]``)."""
    if "belief" in batch.hypothesis:
        return f"belief over the {getattr(task, 'belief_over', 'latent states')}"
    return "posterior over the answer classes" if batch.posterior is not None else \
        "(mean, log variance) of the Gaussian predictive"


def vertex_names(task, batch, C: int) -> list[str]:
    """Names of the simplex's vertices: the hidden states a belief is over, else c0, c1, ..."""
    if "belief" in batch.hypothesis and hasattr(task, "state_names"):
        return task.state_names()
    return [f"c{c}" for c in range(C)]


def per_layer_figure(metrics: dict) -> go.Figure:
    per = metrics["per_layer"]
    x = [f"L{l}" for l in per["layer"]]
    fig = go.Figure()
    for key, name, color, dash in (("r2", "trained", "#d62728", None), ("untrained_r2", "untrained twin", "#7f7f7f", "dot"),
                                   ("shuffled_r2", "shuffled beliefs", "#1f77b4", "dash")):
        bounds = per.get(f"{key}_interval") or [None] * len(x)  # none in a record from before the intervals
        fig.add_scatter(x=x, y=per[key], name=name, legendgroup=key, mode="lines+markers", line=dict(color=color, dash=dash),
                        error_y=error_bars(per[key], bounds),
                        customdata=[[hook, *(b or ["?", "?"])] for hook, b in zip(per["hook"], bounds)],
                        hovertemplate=f"{name}<br>%{{customdata[0]}}<br>R² %{{y:.4f}} (95% %{{customdata[1]:.4f}} to "
                                      f"%{{customdata[2]:.4f}})<extra></extra>")
        if "concat" in metrics:  # a record from before the concatenated read-out has none
            value, bound = metrics["concat"][key], metrics["concat"][f"{key}_interval"]
            fig.add_scatter(x=["all layers"], y=[value], mode="markers", showlegend=False, legendgroup=key,
                            marker=dict(color=color, symbol="diamond", size=9), error_y=error_bars([value], [bound]),
                            hovertemplate=f"{name}<br>every layer concatenated<br>R² %{{y:.4f}} (95% {bound[0]:.4f} "
                                          f"to {bound[1]:.4f})<extra></extra>")
    n_test = metrics.get("n_test_sequences")
    bars = (f"<br><sup>bars: 95% bootstrap intervals over the {n_test:,} held-out sequences "
            f"({metrics['n_test_points']:,} queries)</sup>" if n_test else "")
    fig.update_layout(title=f"Linear read-out of the Bayes belief ({metrics['target']}) by layer, held out{bars}",
                      xaxis_title="residual stream after block (diamonds: every block's concatenated)",
                      yaxis_title="held-out R²",
                      width=760, height=440)
    return fig


def class_colours(C: int) -> list[str]:
    """A distinct colour per answer class: the shared categorical palette, or Turbo sampled for more classes."""
    if C <= len(PALETTE):
        return PALETTE[:C]
    from plotly.colors import sample_colorscale

    return sample_colorscale("Turbo", [c / (C - 1) for c in range(C)])


def vertex_colours(C: int) -> np.ndarray:
    """[C, 3] RGB of each vertex: red, green and blue for 3 classes (as Shai et al. draw Mess3), else the classes'."""
    if C == 3:
        return np.array([[214, 39, 40], [44, 160, 44], [31, 119, 180]], float)
    from plotly.colors import hex_to_rgb, unlabel_rgb

    return np.array([hex_to_rgb(c) if c.startswith("#") else unlabel_rgb(c) for c in class_colours(C)], float)


def rgb(values) -> str:
    return "rgb({:.0f},{:.0f},{:.0f})".format(*values)


def belief_colours(beliefs: np.ndarray) -> list[str]:
    """Each belief's colour, the belief-weighted mix of its vertices' colours: nearby beliefs get nearby colours,
    so a fractal's nesting shows in any panel."""
    weights = np.clip(beliefs, 0, None)
    mixed = weights @ vertex_colours(beliefs.shape[1]) / weights.sum(1, keepdims=True).clip(1e-12)
    return [rgb(values) for values in mixed]


def layered_simplex_figure(bayes: np.ndarray, read_outs: list[np.ndarray], labels: list[str], r2: list[float],
                           target: str, seed: int, names: list[str] | None = None,
                           what: str = "its linear read-out from each layer") -> go.Figure:
    """The Bayes beliefs of the held-out points on the simplex, then each layer's read-out of the same points (and
    the concatenation's), every point coloured by its Bayes belief: where a read-out keeps the colours' nesting it
    holds the belief's geometry, not only its average."""
    C = bayes.shape[1]
    angles = np.pi / 2 + 2 * np.pi * np.arange(C) / C
    vertices = np.stack([np.cos(angles), np.sin(angles)], -1)
    shown = np.random.default_rng(seed + 2).choice(len(bayes), size=min(SIMPLEX_POINTS, len(bayes)), replace=False)
    colours = belief_colours(bayes[shown])
    panels = [("Bayes belief", bayes)] + [(f"{label}: R² {value:.3f}", read)
                                          for label, read, value in zip(labels, read_outs, r2)]
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[title for title, _ in panels],
                        horizontal_spacing=0.03, vertical_spacing=0.08)
    ring = np.vstack([vertices, vertices[:1]])
    for i, (title, beliefs) in enumerate(panels):
        row, col = i // cols + 1, i % cols + 1
        fig.add_scatter(x=ring[:, 0], y=ring[:, 1], mode="lines", showlegend=False, row=row, col=col,
                        line=dict(color="black", width=1), hoverinfo="skip")
        xy = beliefs[shown] @ vertices
        fig.add_scatter(x=xy[:, 0], y=xy[:, 1], mode="markers", showlegend=False, row=row, col=col,
                        marker=dict(size=3, opacity=0.7, color=colours), hoverinfo="skip",
                        meta=dict(colour_key="mixed from the legend's"))
    names = names or [f"c{c}" for c in range(C)]
    for c, colour in enumerate(vertex_colours(C)):  # the key: each vertex's colour, drawn at that vertex
        fig.add_scatter(x=vertices[c:c + 1, 0], y=vertices[c:c + 1, 1], mode="markers", name=f"certain of {names[c]}",
                        marker=dict(size=9, color=rgb(colour), line=dict(color="black", width=1)), row=1, col=1,
                        hovertemplate=f"vertex: certain of {names[c]}<extra></extra>")
    reach = 1.1
    for i in range(len(panels)):
        axis = "" if i == 0 else str(i + 1)
        fig.update_xaxes(visible=False, range=[-reach, reach], scaleanchor=f"y{axis}", row=i // cols + 1,
                         col=i % cols + 1)
    fig.update_yaxes(visible=False, range=[-reach, reach])
    fig.update_layout(title=f"The {target} and {what}<br><sup>{len(shown)} held-out points on the {C}-vertex "
                            f"simplex, coloured by their Bayes belief in every panel; R² held out</sup>",
                      legend=dict(title_text="vertex", itemsizing="constant"),
                      width=300 * cols + 200, height=300 * rows + 110, margin=dict(t=110, l=20, r=20, b=20))
    return fig


def simplex_figure(bayes: np.ndarray, decoded: np.ndarray, seed: int) -> go.Figure:
    """Both sets of beliefs on the C-gon, one legend entry per Bayes arg-max class (the points' colour) and
    the vertex labels outside the polygon, where neither an edge nor a point crosses them."""
    C = bayes.shape[1]
    angles = np.pi / 2 + 2 * np.pi * np.arange(C) / C
    vertices = np.stack([np.cos(angles), np.sin(angles)], -1)
    shown = np.random.default_rng(seed + 2).choice(len(bayes), size=min(SIMPLEX_POINTS, len(bayes)), replace=False)
    arg_max, colours = bayes[shown].argmax(1), class_colours(C)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Bayes belief", "read out of the final layer"),
                        horizontal_spacing=0.08)
    ring = np.vstack([vertices, vertices[:1]])
    outside = 1.16 * vertices  # label anchors beyond the vertices, centred on the ray through each
    for col, beliefs in ((1, bayes[shown]), (2, decoded[shown])):
        fig.add_scatter(x=ring[:, 0], y=ring[:, 1], mode="lines", showlegend=False, row=1, col=col,
                        line=dict(color="black", width=1), hoverinfo="skip")
        xy = beliefs @ vertices
        for c in range(C):
            idx = arg_max == c
            fig.add_scatter(x=xy[idx, 0], y=xy[idx, 1], mode="markers", name=f"c{c}", legendgroup=f"c{c}",
                            showlegend=col == 1, row=1, col=col,
                            marker=dict(size=4, opacity=0.6, color=colours[c]),
                            hovertemplate=f"Bayes arg-max class c{c}<extra></extra>")
        fig.add_scatter(x=outside[:, 0], y=outside[:, 1], mode="text", showlegend=False, row=1, col=col,
                        text=[f"<b>c{c}</b>" for c in range(C)], textposition="middle center",
                        textfont=dict(size=13), hoverinfo="skip")
    reach = 1.3  # room for the labels around the unit circle
    for col, y in ((1, "y"), (2, "y2")):  # each panel round, on its own y axis
        fig.update_xaxes(visible=False, range=[-reach, reach], scaleanchor=y, row=1, col=col)
    fig.update_yaxes(visible=False, range=[-reach, reach])
    fig.update_layout(title=f"Beliefs on the {C}-class simplex (vertex c = certainty on class c), {len(shown)} "
                            f"held-out points, coloured by the Bayes arg-max",
                      legend=dict(title_text="Bayes arg-max", itemsizing="constant"), width=960, height=480)
    return fig


ANALYSIS = Analysis(
    "belief-state", "held-out linear read-out of the full Bayes belief from each layer, vs untrained and shuffled",
    DEFINITION, compute, options=(n_option(500), seed_option()), order=9)
