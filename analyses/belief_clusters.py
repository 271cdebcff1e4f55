"""Belief clusters: does an HMM model's residual stream cluster by hidden state?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from models.base import act_name

from .activations import collect
from .base import Analysis, AnalysisError, Result, eval_batch, n_option, seed_option
from .intervals import bootstrap_sums
from .style import error_bars

DEFINITION = " ".join("""
 On one held-out batch of n HMM sequences, the residual stream after every block l
(blocks.l.hook_resid_post, the last block being the final layer; it is taken before the final
norm, where the paper's Mamba figure used the hidden state after the last norm) is read at the
observation positions (the query positions, in order o_1..o_K of each sequence), giving N = n K
points per layer. Each point is labelled by the TRUE hidden state s_t that emitted o_t
(batch.hypothesis["states"]); the paper's figure coloured points by this "arg-max true state"
(the arg-max of the true state's one-hot, i.e. the state itself), not by the Bayes posterior. The
2-D projection is PCA (sklearn, centred, unscaled) of the final layer's points. Per layer: k-means
(sklearn KMeans, k = S, n_init=10, random_state=seed) on the raw residual vectors; the silhouette
score (sklearn, Euclidean) of the k-means clustering and, separately, of the true-state labelling,
both on one seeded random subsample of at most 2000 points (the same points for every layer and
labelling; null when a labelling has fewer than 2 distinct labels there); the purity of the k-means
clusters against the true state, (1/N) sum over clusters of the count of the cluster's most common
true state (1 when every cluster holds one state; about the largest state share for unrelated
clusters), and likewise against the Bayes posterior's arg-max (for a task that gives a belief over
hidden states beside its answers, a process such as Mess3, that belief's arg-max). bayes_map_accuracy, the fraction of
points whose Bayes arg-max is the true state, is the context for the true-state numbers: a model
that represents exactly the Bayes belief cannot separate states the posterior itself confuses.
The headline numbers are those of the final layer. Intervals: 95% percentile bootstrap (2,000 resamples,
seeded) resampling whole sequences (the points of one sequence share its hidden chain), every layer's
numbers recomputed from per-sequence sums, with the fitted k-means clusters, the silhouette subsample and
the distances each point's silhouette is measured against held fixed: an interval of the evaluation set's
noise given the clustering, not of k-means' own variability (refitting it 2,000 times would cost 2,000
fits per layer).
""".split())

DESCRIPTIONS = {
    "purity": "final layer: k-means purity against the true hidden state",
    "intervals": "95% bootstrap intervals resampling whole sequences (2,000 resamples), the k-means clusters and "
                 "the silhouette subsample fixed: headline numbers and per_layer",
    "n_points": "observation positions (n_sequences sequences x K observations)",
}

SILHOUETTE_POINTS = 2000
SCATTER_POINTS = 3000  # points drawn in the scatter (PCA is fitted on all of them)
CHUNK = 256
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f"]


# -- helpers with known answers ----------------------------------------------------------------
def purity(clusters: np.ndarray, labels: np.ndarray) -> float:
    """(1/N) sum over clusters of the count of the cluster's most common label."""
    clusters, labels = np.asarray(clusters), np.asarray(labels)
    total = 0
    for c in np.unique(clusters):
        total += np.bincount(labels[clusters == c]).max()
    return float(total / len(labels))


def kmeans_labels(points: np.ndarray, k: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(points)


def silhouette(points: np.ndarray, labels: np.ndarray, subsample: np.ndarray) -> float | None:
    """Silhouette score of ``labels`` on the points ``subsample``; None with fewer than 2 labels there."""
    values = silhouette_values(points, labels, subsample)
    return None if values is None else float(values.mean())


def silhouette_values(points: np.ndarray, labels: np.ndarray, subsample: np.ndarray) -> np.ndarray | None:
    """Each point's silhouette (sklearn's silhouette_samples; their mean is silhouette_score) on ``subsample``."""
    from sklearn.metrics import silhouette_samples

    x, y = points[subsample], np.asarray(labels)[subsample]
    if not 2 <= len(np.unique(y)) <= len(y) - 1:
        return None
    return silhouette_samples(x, y, metric="euclidean")


def per_sequence(sequence: np.ndarray, n: int, values: np.ndarray) -> torch.Tensor:
    """Per-point ``values`` [m, c] summed over the points of each of the n sequences (``sequence``: each point's)."""
    values = torch.as_tensor(np.asarray(values, dtype=np.float64)).reshape(len(sequence), -1)
    return torch.zeros(n, values.shape[1], dtype=torch.float64).index_add_(0, torch.from_numpy(sequence), values)


def contingency(sequence: np.ndarray, n: int, clusters: np.ndarray, labels: np.ndarray, k: int) -> torch.Tensor:
    """Per sequence, how many of its points fall in each (cluster, label) cell: [n, k * k] (labels < k)."""
    return per_sequence(sequence, n, np.eye(k * k)[np.asarray(clusters) * k + np.asarray(labels)])


def purity_of(cells: torch.Tensor, k: int) -> torch.Tensor:
    """``purity`` from contingency counts [..., k * k]: each cluster's largest label count, summed, over all."""
    table = cells.reshape(*cells.shape[:-1], k, k)
    return table.amax(-1).sum(-1) / table.sum((-1, -2))


def subsample_indices(n_points: int, seed: int, size: int = SILHOUETTE_POINTS) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_points, size=min(size, n_points), replace=False))


def resid_name(layer: int) -> str:
    return act_name("resid_post", layer)


@torch.no_grad()
def residuals_at_queries(model, batch) -> list[np.ndarray]:
    """Per layer, the residual stream at query positions [N, d_model], row-major (sequence, position)."""
    names = [resid_name(l) for l in range(model.cfg.n_layers)]
    cache = collect(model, batch.tokens, names, CHUNK, mask=batch.query_mask)
    return [cache[name].double().numpy() for name in names]


def compute(model, n: int = 500, seed: int = 1234) -> Result:
    """k-means, silhouette and purity of the residual stream at query positions, per layer, by latent state."""
    task = model.task
    n_layers = model.cfg.n_layers
    missing = [resid_name(l) for l in range(n_layers) if resid_name(l) not in getattr(model, "hook_dict", {})]
    if missing:
        raise AnalysisError(f"belief-clusters needs the hook point(s) {', '.join(missing)}, which this model lacks")
    S = task.n_latent_classes()  # the number of latent states: the clusters k-means looks for
    batch = eval_batch(model, n, seed)
    mask = batch.query_mask.cpu()
    states = batch.hypothesis[task.query_latent].cpu()  # [B, K], in the order of the observation positions
    if not torch.equal(mask.sum(1), torch.full((len(batch),), states.shape[1])):
        raise AnalysisError("belief-clusters: the query positions do not line up with the hidden states")
    truth = states.flatten().numpy()  # row-major, matching resid[mask]
    # the Bayes belief over the latent states: the posterior itself where the answers are those states (the HMM), the
    # belief a task gives beside its answers where they are not (a process: answers are tokens, beliefs are states)
    posterior = (batch.hypothesis["belief"] if "belief" in batch.hypothesis else batch.posterior).cpu()[mask].double()
    bayes_map = posterior.argmax(-1).numpy()
    bayes_max = posterior.max(-1).values.numpy()
    seq_index, position = (t.numpy() for t in mask.nonzero(as_tuple=True))
    n_points = len(truth)
    if n_points <= S:
        raise AnalysisError(f"belief-clusters needs more than S={S} observation positions; got {n_points} (raise --n)")

    residuals = residuals_at_queries(model, batch)
    sub = subsample_indices(n_points, seed)
    layers = dict(kmeans_silhouette=[], true_state_silhouette=[], purity=[], purity_vs_bayes_map=[])
    n = len(batch)
    # per sequence, the sums every number is a function of (for the bootstrap): per layer two silhouette sums
    # and two contingency tables; then how many subsample points, points and Bayes hits, and the state counts
    columns = []
    for points in residuals:
        clusters = kmeans_labels(points, S, seed)
        for labels in (clusters, truth):
            values = silhouette_values(points, labels, sub)
            name = "kmeans_silhouette" if labels is clusters else "true_state_silhouette"
            layers[name].append(None if values is None else float(values.mean()))
            columns.append(per_sequence(seq_index[sub], n, np.zeros(len(sub)) if values is None else values))
        layers["purity"].append(purity(clusters, truth))
        layers["purity_vs_bayes_map"].append(purity(clusters, bayes_map))
        columns += [contingency(seq_index, n, clusters, truth, S), contingency(seq_index, n, clusters, bayes_map, S)]
    columns += [per_sequence(seq_index[sub], n, np.ones(len(sub))), per_sequence(seq_index, n, np.eye(S)[truth]),
                per_sequence(seq_index, n, bayes_map == truth)]
    intervals = cluster_intervals(torch.cat(columns, 1), layers, S, n_layers)

    from sklearn.decomposition import PCA

    pca = PCA(n_components=2, random_state=seed).fit(residuals[-1])
    projected = pca.transform(residuals[-1])
    metrics = dict(
        kmeans_silhouette=layers["kmeans_silhouette"][-1], true_state_silhouette=layers["true_state_silhouette"][-1],
        purity=layers["purity"][-1], purity_vs_bayes_map=layers["purity_vs_bayes_map"][-1],
        bayes_map_accuracy=float((bayes_map == truth).mean()),
        majority_state_share=float(np.bincount(truth, minlength=S).max() / n_points),
        pca_explained_variance_ratio=[float(v) for v in pca.explained_variance_ratio_],
        per_layer=dict(layer=list(range(n_layers)), hook=[resid_name(l) for l in range(n_layers)], **layers),
        n_states=S, n_layers=n_layers, n_points=n_points, silhouette_points=len(sub),
        n_sequences=len(batch), seed=seed, intervals=intervals,
    )
    obs_index = position - task.stream_start + 1  # the observation's number in its sequence, from 1
    return Result("belief-clusters", DEFINITION, metrics, descriptions=DESCRIPTIONS, figures={
        "pca-scatter": scatter_figure(projected, truth, seq_index, obs_index, position, bayes_max, bayes_map,
                                      pca.explained_variance_ratio_, S, metrics, seed),
        "per-layer": per_layer_figure(metrics),
    })


PER_LAYER = ("kmeans_silhouette", "true_state_silhouette", "purity", "purity_vs_bayes_map")


def cluster_intervals(columns: torch.Tensor, layers: dict, S: int, n_layers: int) -> dict:
    """Intervals of every per-layer number, the final layer's (the headline), bayes_map_accuracy and
    majority_state_share from per-sequence sums ``columns``, laid out as ``compute`` builds them."""
    width = 2 + 2 * S * S  # per layer: two silhouette sums, two contingency tables

    def statistic(r):  # [R, columns] -> per layer the four numbers, then the two shared ones
        sub, counts, hits = r[:, n_layers * width], r[:, n_layers * width + 1:-1], r[:, -1]
        out = []
        for l in range(n_layers):
            part = r[:, l * width:(l + 1) * width]
            out += [part[:, 0] / sub, part[:, 1] / sub, purity_of(part[:, 2:2 + S * S], S),
                    purity_of(part[:, 2 + S * S:], S)]
        total = counts.sum(1)
        return torch.stack(out + [hits / total, counts.amax(1) / total], 1)

    bounds = bootstrap_sums(columns, statistic)
    per_layer = {key: [None if layers[key][l] is None else bounds[4 * l + i] for l in range(n_layers)]
                 for i, key in enumerate(PER_LAYER)}
    return dict({key: values[-1] for key, values in per_layer.items()}, per_layer=per_layer,
                bayes_map_accuracy=bounds[-2], majority_state_share=bounds[-1])


def scatter_figure(xy, truth, seq_index, obs_index, position, bayes_max, bayes_map, explained, S, metrics, seed) -> go.Figure:
    shown = subsample_indices(len(truth), seed + 1, SCATTER_POINTS)
    fig = go.Figure()
    for s in range(S):
        idx = shown[truth[shown] == s]
        fig.add_scatter(
            x=xy[idx, 0], y=xy[idx, 1], mode="markers", name=f"true state s{s}",
            marker=dict(size=5, opacity=0.7, color=PALETTE[s % len(PALETTE)]),
            customdata=np.stack([seq_index[idx], obs_index[idx], position[idx], truth[idx], bayes_max[idx],
                                 bayes_map[idx]], -1),
            hovertemplate="sequence %{customdata[0]}, observation %{customdata[1]} (token %{customdata[2]})"
                          "<br>true state s%{customdata[3]}<br>Bayes posterior max %{customdata[4]:.3f} "
                          "(on s%{customdata[5]})<extra></extra>")
    shown_note = f"{len(shown)} of {len(truth)} points shown" if len(shown) < len(truth) else f"{len(truth)} points"
    sil = metrics["true_state_silhouette"]
    fig.update_layout(
        title=f"Final-layer residual stream at observations, PCA, coloured by the true hidden state<br>"
              f"<sup>{shown_note}; k-means purity {metrics['purity']:.3f}, silhouette of true states "
              f"{'n/a' if sil is None else f'{sil:.3f}'}</sup>",
        xaxis_title=f"PC1 ({100 * explained[0]:.1f}% of variance)",
        yaxis_title=f"PC2 ({100 * explained[1]:.1f}% of variance)",
        width=760, height=620)
    return fig


def per_layer_figure(metrics: dict) -> go.Figure:
    per = metrics["per_layer"]
    x = [f"L{l}" for l in per["layer"]]
    fig = go.Figure()
    for key, name, color, dash in (("kmeans_silhouette", "silhouette, k-means clusters", "#1f77b4", None),
                                   ("true_state_silhouette", "silhouette, true-state labels", "#17becf", "dot"),
                                   ("purity", "k-means purity vs true state", "#d62728", None),
                                   ("purity_vs_bayes_map", "k-means purity vs Bayes arg-max", "#ff7f0e", "dot")):
        y = [float("nan") if v is None else v for v in per[key]]
        fig.add_scatter(x=x, y=y, name=name, mode="lines+markers", line=dict(color=color, dash=dash),
                        error_y=error_bars(per[key], metrics["intervals"]["per_layer"][key]),
                        customdata=per["hook"],
                        hovertemplate=f"{name}<br>%{{customdata}}<br>%{{y:.3f}}<extra></extra>")
    fig.add_scatter(x=[x[0], x[-1]], y=[metrics["majority_state_share"]] * 2, mode="lines",
                    name="largest true-state share (purity of uninformative clusters)",
                    line=dict(color="gray", dash="dash", width=1), hoverinfo="skip")
    fig.update_layout(title=f"Belief clusters by layer (k = S = {metrics['n_states']} k-means clusters)<br><sup>"
                            f"bars: 95% bootstrap intervals over {metrics['n_sequences']:,} sequences "
                            f"({metrics['n_points']:,} points; silhouettes on {metrics['silhouette_points']:,}), "
                            f"clusters fixed</sup>",
                      xaxis_title="residual stream after block", yaxis_title="silhouette / purity",
                      width=760, height=440)
    return fig


ANALYSIS = Analysis(
    "belief-clusters", "does the residual stream cluster by the latent state (k-means purity, silhouette)?",
    DEFINITION, compute, options=(n_option(500), seed_option()), requires=("query-latent",), order=8)
