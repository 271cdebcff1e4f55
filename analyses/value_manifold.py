"""Value manifold: is the posterior entropy a principal direction of the model's representations?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from scipy import linalg, stats
from sklearn.decomposition import PCA

from models.base import act_name

from . import activations
from .base import (Analysis, AnalysisError, Option, Result, eval_batch, n_option, readout_r2, seed_option,
                   untrained_twin)

DEFINITION = " ".join("""
 On one held-out batch of n sequences, the activations at every query position (where
batch.query_mask is set) are collected per layer l from two streams: the residual stream after the
block, blocks.l.hook_resid_post, and the attention output of the block, blocks.l.hook_attn_out
(skipped, with the reason in the metrics, when the model has no attention hooks). Each point is
labelled with the exact Bayes entropy at its query, batch.bayes_entropy in bits (a differential
entropy for continuous tasks). Per layer and stream, a PCA (scikit-learn, centred, not whitened,
fitted on all points) gives: the fraction of variance explained by PC1 and by PC1 + PC2; the Pearson
and the Spearman correlation of the PC1 scores with the entropy, reported as an absolute value with
the sign kept separately (the sign of a principal component is arbitrary); and |Pearson| of PC2.
The linear read-out is an ordinary least-squares regression (scikit-learn LinearRegression, with
intercept) of the entropy on the full activation vector, fitted on a random half of the points
(seeded) and scored by R² on the other half. A correlation or R² is null when either side is
constant. The scatter figures show PC1 against PC2 of a seeded random subsample of at most
max_points points (the same points in every panel; one page per colouring, a row per stream, at most six
evenly spaced layers); the reference implementation ran the PCA on the
final residual stream only, coloured by log2(#unseen values), which for bijection is this entropy.
For bijection that entropy is a function of the query position alone, so anything that carries
the position (even the untrained position embeddings) can read it out linearly:
residual_readout_r2_untrained is the same read-out, on the same points and halves, from each layer's
residual stream of the untrained model (same architecture, config and seed at step 0), the part of
R² that needs no training (final_residual_readout_r2_untrained: its last layer); the read-out figure
draws it beside the trained R². When the task declares a latent class at every query (HMM: the true
hidden state), the same scatter is drawn a second time coloured by that class (pca-by-<latent>).
""".split())

STREAMS = {"residual": "resid_post", "attention_out": "attn_out"}
TITLES = {"residual": "residual stream after the block", "attention_out": "attention output"}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
CATEGORICAL = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
               "#17becf")


def hook_name(stream: str, layer: int) -> str:
    return act_name(STREAMS[stream], layer)


@torch.no_grad()
def collect(model, batch, names: list[str], chunk: int = 256) -> dict[str, np.ndarray]:
    """Activations at the query positions, [n_points, d] per hook, points in (row, position) order."""
    cache = activations.collect(model, batch.tokens, names, chunk, mask=batch.query_mask)
    return {name: values.float().numpy() for name, values in cache.items()}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def correlation(a: np.ndarray, b: np.ndarray, kind: str = "pearson") -> float | None:
    """Signed Pearson or Spearman correlation, None when either side is (numerically) constant."""
    if len(a) < 3 or np.ptp(a) <= 1e-12 * max(1.0, np.abs(a).max()) or np.ptp(b) == 0:
        return None
    r = stats.pearsonr(a, b)[0] if kind == "pearson" else stats.spearmanr(a, b)[0]
    return _finite(r)


def _abs_sign(r: float | None) -> tuple[float | None, int | None]:
    return (None, None) if r is None else (abs(r), 1 if r >= 0 else -1)


def split_halves(n_points: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split of the points into a fitting half and an evaluation half."""
    order = np.random.default_rng(seed).permutation(n_points)
    return order[: n_points // 2], order[n_points // 2:]


def stream_stats(X: np.ndarray, entropy: np.ndarray, fit: np.ndarray, test: np.ndarray,
                 readout: bool = True, ridge: bool = False) -> tuple[dict, np.ndarray]:
    """PCA numbers of one stream at one layer, and the points' [n, 2] PC1/PC2 scores (``readout``: also the
    read-out R², the slow part)."""
    X = np.asarray(X, dtype=np.float64)
    entropy = np.asarray(entropy, dtype=np.float64)
    k = min(2, X.shape[1], X.shape[0])
    total = X.var(0).sum()
    if k < 1 or total <= 0:
        scores, ratio = np.zeros((len(X), 2)), [None, None]
    else:
        pca = PCA(n_components=k).fit(X)
        scores = np.zeros((len(X), 2))
        scores[:, :k] = pca.transform(X)
        ratio = [_finite(r) for r in pca.explained_variance_ratio_] + [None] * (2 - k)
    pearson, spearman = correlation(scores[:, 0], entropy), correlation(scores[:, 0], entropy, "spearman")
    pearson_abs, pearson_sign = _abs_sign(pearson)
    spearman_abs, spearman_sign = _abs_sign(spearman)
    pc2 = correlation(scores[:, 1], entropy)
    numbers = dict(
        pc1_variance=ratio[0],
        pc12_variance=None if ratio[0] is None else ratio[0] + (ratio[1] or 0.0),
        pc1_pearson_abs=pearson_abs, pc1_pearson_sign=pearson_sign,
        pc1_spearman_abs=spearman_abs, pc1_spearman_sign=spearman_sign,
        pc2_pearson_abs=None if pc2 is None else abs(pc2),
        readout_r2=readout_r2(X, entropy, fit, test, ridge) if readout else None,
    )
    return numbers, scores


MAX_POINTS = 600  # points drawn in each scatter panel by default (the numbers use every point)
GRID_LAYERS = 6  # a report's scatter pages show at most this many layers, evenly spaced, the last included


def compute(model, n: int = 1000, seed: int = 1234, max_points: int = MAX_POINTS) -> Result:
    """PCA of the residual stream and attention output at query positions, against the Bayes entropy."""
    return measure(model, n, seed, max_points, readout=True, merged=True)


def measure(model, n: int, seed: int, max_points: int, readout: bool, merged: bool = False) -> Result:
    """``compute``; ``readout=False`` (the explorer's geometry view): the PCA and its figures only, without the
    read-out R² and the untrained twin, which take most of the time. ``merged`` (a report): each colouring is one
    page with a row per stream (``pca``, ``pca-by-position``, ``pca-by-<latent>``) instead of a page per stream
    and colouring (``<stream>-pca``, ``<stream>-pca-by-position``, ..., which the explorer shows one at a time);
    the points are drawn in single precision either way."""
    hook_dict = getattr(model, "hook_dict", None)
    n_layers = getattr(getattr(model, "cfg", None), "n_layers", None)
    if hook_dict is None or n_layers is None:
        raise AnalysisError(f"value-manifold needs a hooked model with blocks; "
                            f"{getattr(model, 'arch', type(model).__name__)} is not one")
    streams = [s for s in STREAMS if all(hook_name(s, l) in hook_dict for l in range(n_layers))]
    if "residual" not in streams:
        raise AnalysisError(f"value-manifold needs the hook points blocks.<layer>.hook_resid_post, which "
                            f"this {getattr(model, 'arch', 'model')} lacks")
    skipped = {}
    if "attention_out" not in streams:
        skipped["attention_out"] = "the model has no blocks.<layer>.hook_attn_out hook points (no attention)"

    batch = eval_batch(model, n, seed)
    mask = batch.query_mask
    rows, positions = (t.cpu().numpy() for t in mask.nonzero(as_tuple=True))
    entropy = batch.bayes_entropy[mask].double().cpu().numpy()
    top = None if batch.posterior is None else batch.posterior[mask].max(-1).values.double().cpu().numpy()
    latent = latent_at_queries(model.task, batch)
    n_points = len(entropy)
    if n_points < 4:
        raise AnalysisError(f"value-manifold needs at least 4 query positions, got {n_points} (raise n)")
    fit, test = split_halves(n_points, seed)
    rng = np.random.default_rng(seed + 1)
    shown = np.sort(rng.choice(n_points, size=min(max_points, n_points), replace=False))

    acts = collect(model, batch, [hook_name(s, l) for s in streams for l in range(n_layers)])
    per_stream, scatter = {}, {}
    for s in streams:
        table = {}
        scatter[s] = []
        for l in range(n_layers):
            numbers, scores = stream_stats(acts.pop(hook_name(s, l)), entropy, fit, test, readout)
            for key, value in numbers.items():
                table.setdefault(key, []).append(value)
            scatter[s].append(dict(scores=scores[shown], numbers=numbers))
        per_stream[s] = dict(hook=act_name(STREAMS[s], "<layer>"), **table)

    last = {k: v[-1] for k, v in per_stream["residual"].items() if isinstance(v, list)}
    residual = [hook_name("residual", l) for l in range(n_layers)]
    if readout:
        twin = collect(untrained_twin(model), batch, residual)
        untrained_r2 = [readout_r2(twin.pop(name).astype(np.float64), entropy, fit, test) for name in residual]
    else:
        untrained_r2 = [None] * n_layers
    metrics = dict(
        final_residual_pc1_variance=last["pc1_variance"], final_residual_pc12_variance=last["pc12_variance"],
        final_residual_pc1_pearson_abs=last["pc1_pearson_abs"],
        final_residual_pc1_spearman_abs=last["pc1_spearman_abs"], final_residual_readout_r2=last["readout_r2"],
        final_residual_readout_r2_untrained=untrained_r2[-1], residual_readout_r2_untrained=untrained_r2,
        n_sequences=len(batch), n_points=n_points, n_points_shown=len(shown), n_fit=len(fit), n_test=len(test),
        n_layers=n_layers, seed=seed, entropy_mean_bits=float(entropy.mean()), entropy_std_bits=float(entropy.std()),
        readout="LinearRegression (with intercept) of the Bayes entropy on the full activation vector, "
                "fitted on a seeded random half of the query points, R² on the other half",
        streams=per_stream, skipped=skipped,
    )
    hover = dict(rows=rows[shown], positions=positions[shown], entropy=entropy[shown],
                 top=None if top is None else top[shown], latent=None if latent is None else latent[shown])
    task_name = model.task.name
    if merged:
        colourings = [("pca", {}), ("pca-by-position", dict(by_position=True))]
        if latent is not None:
            colourings.append((f"pca-by-{model.task.query_latent}", dict(by_latent=model.task.query_latent)))
        figures = {name: grid_figure(scatter, hover, task_name, **how) for name, how in colourings}
        if readout:
            figures["entropy-readout"] = readout_figure(per_stream, untrained_r2, task_name, skipped)
        return Result("value-manifold", DEFINITION, metrics, figures)
    figures = {f"{s.replace('_', '-')}-pca": scatter_figure(scatter[s], hover, s, task_name) for s in streams}
    # the same points coloured by token position: structure that is position, not belief, shows as bands
    # of one colour (on the HMM the spokes of the PCA are the positions)
    figures.update({f"{s.replace('_', '-')}-pca-by-position": scatter_figure(scatter[s], hover, s, task_name,
                                                                             by_position=True) for s in streams})
    if latent is not None:  # the same points coloured by the task's true latent class at each query
        figures.update({f"{s.replace('_', '-')}-pca-by-{model.task.query_latent}":
                        scatter_figure(scatter[s], hover, s, task_name, by_latent=model.task.query_latent)
                        for s in streams})
    if readout:
        figures["entropy-readout"] = readout_figure(per_stream, untrained_r2, task_name, skipped)
    return Result("value-manifold", DEFINITION, metrics, figures)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def latent_at_queries(task, batch) -> np.ndarray | None:
    """The task's true latent class at each query point (row-major, as ``batch.query_mask`` orders them), when
    it declares one (HMM: the hidden state) and the batch keeps it; None otherwise."""
    if task.query_latent is None or task.query_latent not in (batch.hypothesis or {}):
        return None
    states = batch.hypothesis[task.query_latent].cpu()
    if not torch.equal(batch.query_mask.sum(1).cpu(), torch.full((len(batch),), states.shape[1])):
        return None  # not one latent per query: nothing to colour by
    return states.flatten().numpy()


def _point_data(hover: dict) -> tuple[np.ndarray, str]:
    """Every point's hover columns [n, 3 or 4] (sequence, token, Bayes entropy, top posterior) in single
    precision, and the hover text that reads them."""
    columns = [hover["rows"], hover["positions"], hover["entropy"]]
    template = "sequence %{customdata[0]}, token %{customdata[1]}<br>Bayes entropy %{customdata[2]:.3f} bits"
    if hover["top"] is not None:
        columns.append(hover["top"])
        template += "<br>top posterior %{customdata[3]:.3f}"
    return np.stack(columns, axis=1).astype(np.float32), template


def _latent_groups(hover: dict, by_latent: str) -> list[tuple[str, np.ndarray, str]]:
    singular = by_latent[:-1] if by_latent.endswith("s") else by_latent  # "state 0", not "states 0"
    return [(f"{singular} {c}", hover["latent"] == c, CATEGORICAL[i % len(CATEGORICAL)])
            for i, c in enumerate(np.unique(hover["latent"]))]


def _add_points(fig, d: dict, l: int, where: dict, hover: dict, custom: np.ndarray, template: str,
                by_latent: str | None, by_position: bool, groups: list, legend: bool, what: str = "") -> None:
    """One panel's points (PC1, PC2 in single precision), coloured as ``scatter_figure`` says."""
    scores = np.asarray(d["scores"], dtype=np.float32)
    hovertemplate = f"{what}layer {l}<br>PC1 %{{x:.3f}}, PC2 %{{y:.3f}}<br>{template}<extra></extra>"
    if by_latent is None:
        colour = hover["positions"] if by_position else hover["entropy"]
        fig.add_scatter(x=scores[:, 0], y=scores[:, 1], mode="markers", name=f"layer {l}",
                        showlegend=False, customdata=custom, hovertemplate=hovertemplate, **where,
                        marker=dict(size=4, opacity=0.7, coloraxis="coloraxis",
                                    color=np.asarray(colour, dtype=np.float32)))
    else:
        for name, chosen, color in groups:
            fig.add_scatter(x=scores[chosen, 0], y=scores[chosen, 1], mode="markers", name=name,
                            legendgroup=name, showlegend=legend, customdata=custom[chosen], **where,
                            marker=dict(size=4, opacity=0.7, color=color),
                            hovertemplate=f"{name}<br>{hovertemplate}")


def _colour_axis(fig, by_latent: str | None, by_position: bool) -> str:
    """The colour bar (none for the latent classes: their legend) and what the points are coloured by."""
    if by_latent is None:
        fig.update_layout(coloraxis=dict(colorscale="Cividis" if by_position else "Viridis",
                                         colorbar=dict(title="token position" if by_position else "H Bayes (bits)")))
    return f"the true {by_latent}" if by_latent is not None else "token position" if by_position else "Bayes entropy"


def _panel_title(d: dict, l: int) -> str:
    return f"layer {d.get('layer', l)}: PC1 {_pct(d['numbers']['pc1_variance'])}, |r| {_num(d['numbers']['pc1_pearson_abs'])}"


def scatter_figure(layers: list[dict], hover: dict, stream: str, task_name: str,
                   by_latent: str | None = None, where_points: str = "query positions",
                   by_position: bool = False) -> go.Figure:
    """One PC1/PC2 panel per entry of ``layers`` (each with its ``numbers``, ``scores`` and optionally its
    ``layer`` index, else its place in the list), coloured by the Bayes entropy, or by the true latent class
    (``by_latent``, one legend entry per class), or by token position (``by_position``)."""
    n_layers = len(layers)
    cols = min(n_layers, 3)
    rows = math.ceil(n_layers / cols)
    titles = [_panel_title(d, l) for l, d in enumerate(layers)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.14)
    custom, template = _point_data(hover)
    groups = _latent_groups(hover, by_latent) if by_latent is not None else []
    for i, d in enumerate(layers):
        where = dict(row=i // cols + 1, col=i % cols + 1)
        _add_points(fig, d, d.get("layer", i), where, hover, custom, template, by_latent, by_position, groups, i == 0)
        fig.update_xaxes(title_text="PC1", **where)
        fig.update_yaxes(title_text="PC2", **where)
    colour = _colour_axis(fig, by_latent, by_position)
    fig.update_layout(title=f"{task_name}: PCA of the {TITLES[stream]} at {where_points}, coloured by {colour}"
                            f"<br><sup>{len(hover['entropy'])} points shown</sup>",
                      width=140 + 340 * cols, height=140 + 330 * rows)
    return fig


def grid_figure(scatter: dict[str, list[dict]], hover: dict, task_name: str, by_latent: str | None = None,
                by_position: bool = False) -> go.Figure:
    """A report's page of one colouring: a row of PC1/PC2 panels per stream (``scatter``: stream -> one entry
    per layer, as ``scatter_figure`` takes them), at most ``GRID_LAYERS`` evenly spaced layers per row."""
    streams = list(scatter)
    n_layers = len(scatter[streams[0]])
    shown = sorted({round(i * (n_layers - 1) / (GRID_LAYERS - 1)) for i in range(GRID_LAYERS)}) \
        if n_layers > GRID_LAYERS else list(range(n_layers))
    cols, rows = len(shown), len(streams)
    titles = [_panel_title(scatter[s][l], l) for s in streams for l in shown]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.3 / cols,
                        vertical_spacing=0.3 / rows)
    custom, template = _point_data(hover)
    groups = _latent_groups(hover, by_latent) if by_latent is not None else []
    for r, s in enumerate(streams):
        for c, l in enumerate(shown):
            where = dict(row=r + 1, col=c + 1)
            _add_points(fig, scatter[s][l], l, where, hover, custom, template, by_latent, by_position, groups,
                        r == 0 and c == 0, what=f"{TITLES[s]}<br>")
            fig.update_xaxes(title_text="PC1", **where)
            fig.update_yaxes(title_text=f"{TITLES[s]}<br>PC2" if c == 0 and rows > 1 else "PC2", **where)
    colour = _colour_axis(fig, by_latent, by_position)
    which = "" if len(shown) == n_layers else f", layers {', '.join(map(str, shown))} of {n_layers}"
    what = " and ".join(TITLES[s] for s in streams)
    fig.update_layout(title=f"{task_name}: PCA of the {what} at query positions, coloured by {colour}"
                            f"<br><sup>{'one row per stream; ' if rows > 1 else ''}"
                            f"{len(hover['entropy'])} points shown{which}</sup>",
                      width=160 + 290 * cols, height=140 + 300 * rows)
    return fig


def readout_figure(per_stream: dict, untrained_r2: list, task_name: str, skipped: dict) -> go.Figure:
    """R² and |Pearson| of PC1 per layer and stream, beside the untrained model's residual read-out R²
    (the control: what the architecture gives without training, e.g. the position)."""
    fig = go.Figure()
    for i, (stream, table) in enumerate(per_stream.items()):
        layers = list(range(len(table["readout_r2"])))
        color = PALETTE[i % len(PALETTE)]
        custom = [tuple(float("nan") if v is None else v for v in row)
                  for row in zip(table["pc1_variance"], table["pc1_spearman_abs"], table["pc2_pearson_abs"])]
        fig.add_scatter(x=layers, y=table["readout_r2"], name=f"{stream.replace('_', ' ')}: read-out R²",
                        mode="lines+markers", line=dict(color=color), customdata=custom,
                        hovertemplate=f"{stream}, layer %{{x}}<br>R² %{{y:.4f}}<br>PC1 variance %{{customdata[0]:.3f}}"
                                      "<extra></extra>")
        fig.add_scatter(x=layers, y=table["pc1_pearson_abs"], name=f"{stream.replace('_', ' ')}: |Pearson| PC1",
                        mode="lines+markers", line=dict(color=color, dash="dash"), customdata=custom,
                        hovertemplate=f"{stream}, layer %{{x}}<br>|Pearson| PC1 %{{y:.4f}}"
                                      "<br>|Spearman| PC1 %{customdata[1]:.4f}<br>|Pearson| PC2 %{customdata[2]:.4f}"
                                      "<extra></extra>")
    fig.add_scatter(x=list(range(len(untrained_r2))), y=untrained_r2, name="residual, untrained model: read-out R²",
                    mode="lines+markers", line=dict(color="gray", dash="dot"), marker=dict(symbol="x", size=9),
                    hovertemplate="untrained model (step 0), residual, layer %{x}<br>R² %{y:.4f}<extra></extra>")
    note = "" if not skipped else "<br><sup>" + "; ".join(f"{k} skipped: {v}" for k, v in skipped.items()) + "</sup>"
    n_layers = len(next(iter(per_stream.values()))["readout_r2"])
    fig.update_layout(title=f"{task_name}: how linearly the Bayes entropy is encoded, by layer{note}",
                      xaxis=dict(title="layer", tickmode="array", tickvals=list(range(n_layers))),
                      yaxis=dict(title="R² (held-out half) / |Pearson r|", range=[min(0, _lowest(per_stream, untrained_r2)), 1.05]),
                      width=760, height=460)
    return fig


def _lowest(per_stream: dict, untrained_r2: list) -> float:
    values = [v for t in per_stream.values() for v in t["readout_r2"] + t["pc1_pearson_abs"] + untrained_r2
              if v is not None]
    return min(values, default=0.0) - 0.05


LANGUAGE_DEFINITION = " ".join("""
 On a language model, each point is one prompt of the prompt task at its last position (where one of
the two answer tokens is predicted), labelled with the entropy of the exact Bayes posterior over the
task's latent in bits. Per layer l, the residual stream blocks.l.hook_resid_post at those points gets
the same PCA and correlations as on a wind-tunnel model; the read-out is a ridge regression (scikit-learn
RidgeCV, penalty from 1e-3 to 1e3 chosen by leave-one-out) fitted on a seeded random half of the prompts
and scored by R² on the other, since there are fewer prompts than dimensions. Confidence intervals: the prompts are resampled with
replacement `bootstrap` times (seeded) and the PCA refitted; the 95% interval of PC1 + PC2's share of the
variance and of |Pearson r| between PC1 and the entropy runs from the 2.5th to the 97.5th percentile
of the resampled values. A resample repeats points, which adds to its top components: on points with
no structure the interval can sit above the estimate (by about 0.02 for 300 points in 20 dimensions),
small beside the gap between a manifold (70-95%) and none.
The scatter shows up to six evenly spaced layers. Paper III reports PC1 + PC2 at 70-95% on
single-domain prompts; `--words math` restricts the inputs to one domain, `--words mixed` does not.
""".split())


def pca_share_and_r(X: np.ndarray, entropy: np.ndarray) -> tuple[float, float]:
    """PC1 + PC2's share of the variance and |Pearson r| of PC1 with the entropy (nan when undefined)."""
    centred = X - X.mean(0)
    _, sing, vt = np.linalg.svd(centred, full_matrices=False)
    var = sing ** 2
    if var.sum() <= 0:
        return float("nan"), float("nan")
    pc1 = centred @ vt[0]
    r = correlation(pc1, entropy)
    return float(var[:2].sum() / var.sum()), float("nan") if r is None else abs(r)


def gram_share_and_r(gram: np.ndarray, entropy: np.ndarray) -> tuple[float, float]:
    """``pca_share_and_r`` of points given by their Gram matrix ``gram`` = X X^T [n, n]: the centred Gram
    matrix has the squared singular values of the centred points as its eigenvalues, and PC1's scores are its
    top eigenvector times the first singular value (a scale |r| ignores). For n points wider than n this is an
    n x n eigenproblem, of which only the top two eigenpairs are computed, instead of an n x d SVD."""
    centred = gram - gram.mean(0) - gram.mean(1)[:, None] + gram.mean()
    total = float(np.trace(centred))
    n = len(centred)
    if n < 2 or total <= 0:
        return float("nan"), float("nan")
    values, vectors = linalg.eigh(centred, subset_by_index=[max(n - 2, 0), n - 1])
    r = correlation(vectors[:, -1], entropy)
    return float(values.clip(min=0).sum() / total), float("nan") if r is None else abs(r)


def bootstrap_intervals(X: np.ndarray, entropy: np.ndarray, draws: int, seed: int) -> dict:
    """95% percentile bootstrap intervals of (PC1 + PC2 share, |r(PC1, entropy)|) over resampled points.

    Points wider than they are many (a language model's 576 to 640 dimensions at a few hundred prompts) are
    resampled through their Gram matrix, computed once (``gram_share_and_r``): the same numbers, a tenth of
    the time."""
    if draws == 0:
        return dict(pc12_variance_ci=[None, None], pc1_pearson_abs_ci=[None, None])
    rng = np.random.default_rng(seed)
    X = np.asarray(X, dtype=np.float64)
    draws_idx = (rng.integers(0, len(X), len(X)) for _ in range(draws))
    if X.shape[1] > X.shape[0]:
        gram = X @ X.T
        samples = np.array([gram_share_and_r(gram[np.ix_(idx, idx)], entropy[idx]) for idx in draws_idx])
    else:
        samples = np.array([pca_share_and_r(X[idx], entropy[idx]) for idx in draws_idx])
    low, high = np.nanpercentile(samples, [2.5, 97.5], axis=0)
    return dict(pc12_variance_ci=[_finite(low[0]), _finite(high[0])],
                pc1_pearson_abs_ci=[_finite(low[1]), _finite(high[1])])


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int,
                      bootstrap: int) -> Result:
    """Per layer: the PCA of the residual stream at the prompts' last positions against the posterior entropy."""
    prompt_set = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    n_layers = lm.model.cfg.n_layers
    names = [hook_name("residual", l) for l in range(n_layers)]
    _, caught = activations.last_positions(lm, prompt_set, names)
    entropy = prompt_set.posterior_entropy.numpy()
    if np.ptp(entropy) == 0:
        raise AnalysisError(f"every prompt has the same posterior entropy ({entropy[0]:.4g} bits): there is no "
                            f"entropy to order a manifold by")
    fit, test = split_halves(len(entropy), seed)
    layers = []
    for l, name in enumerate(names):
        X = torch.stack(caught[name]).numpy()
        numbers, scores = stream_stats(X, entropy, fit, test, ridge=True)
        numbers.update(bootstrap_intervals(X, entropy, bootstrap, seed))
        layers.append(dict(layer=l, numbers=numbers, scores=scores))
    table = {key: [d["numbers"][key] for d in layers] for key in layers[0]["numbers"]}
    metrics = dict(residual=table, n_prompts=len(entropy), prompts=prompt_set.description,
                   final_pc12_variance=table["pc12_variance"][-1], final_pc1_pearson_abs=table["pc1_pearson_abs"][-1],
                   final_readout_r2=table["readout_r2"][-1])
    shown = sorted({round(i * (n_layers - 1) / 5) for i in range(6)})
    hover = dict(rows=np.arange(len(entropy)), positions=np.array([len(p.tokens) - 1 for p in prompt_set.prompts]),
                 entropy=entropy, top=prompt_set.bayes.max(-1).values.numpy())
    subject = prompt_set.description
    return Result("value-manifold", LANGUAGE_DEFINITION, metrics, {
        "by-layer": intervals_figure(table, subject),
        "residual-pca": scatter_figure([layers[l] for l in shown], hover, "residual", subject,
                                       where_points="each prompt's last position"),
    })


def intervals_figure(table: dict, subject: str) -> go.Figure:
    layers = list(range(len(table["pc12_variance"])))
    fig = go.Figure()
    for key, ci, name, color in (("pc12_variance", "pc12_variance_ci", "PC1 + PC2 share of variance", PALETTE[0]),
                                 ("pc1_pearson_abs", "pc1_pearson_abs_ci", "|Pearson r| of PC1 with entropy", PALETTE[1]),
                                 ("readout_r2", None, "read-out R² (held-out half)", PALETTE[2])):
        values = [float("nan") if v is None else v for v in table[key]]
        error = None
        if ci:
            low = [v - (c[0] if c[0] is not None else v) for v, c in zip(values, table[ci])]
            high = [(c[1] if c[1] is not None else v) - v for v, c in zip(values, table[ci])]
            error = dict(type="data", array=high, arrayminus=low, visible=True)
        fig.add_scatter(x=layers, y=values, name=name, mode="lines+markers", error_y=error, line=dict(color=color),
                        hovertemplate=f"{name}<br>layer %{{x}}: %{{y:.3f}}<extra></extra>")
    fig.update_layout(title=f"{subject}: value manifold by layer (bars: 95% bootstrap intervals)",
                      xaxis=dict(title="layer", tickmode="array", tickvals=layers),
                      yaxis=dict(title="share / |r| / R²"), width=760, height=460)
    return fig


ANALYSIS = Analysis(
    "value-manifold", "PCA of the residual stream and attention output at queries, against the Bayes entropy",
    DEFINITION, compute,
    options=(n_option(1000), seed_option(), Option("max_points", MAX_POINTS, "points drawn in each scatter panel", low=1)), order=6,
    on_language_model=on_language_model, language_definition=LANGUAGE_DEFINITION,
    language_options=activations.language_options(Option("bootstrap", 200, "bootstrap resamples of the prompts",
                                                       low=0, high=100_000)))
