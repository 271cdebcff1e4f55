"""Frame-precision dissociation: does the hypothesis frame settle before the posterior gets precise?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from models.base import act_name

from . import style
from .base import Analysis, AnalysisError, Result, eval_batch, n_option, readout_r2, seed_option
from .calibration import measure
from .intervals import bootstrap_sums
from .key_orthogonality import key_vectors

DEFINITION = " ".join("""
 Every checkpoint of the model's run (run_dir/checkpoints/step-*.safetensors at steps
s_0 < ... < s_N, s_N the final one) is evaluated on one and the same held-out batch of n sequences.
FRAME, measured against the final checkpoint: (1) attention divergence: per layer l, the
Jensen-Shannon divergence in bits (log base 2, so between 0 and 1) between the checkpoint's and the
final checkpoint's attention rows (blocks.l.attn.hook_pattern, one row per head at each query
position only, a causal distribution over key positions 0..q), averaged over sequences, heads and
query positions; (2) key-frame ratio: at layer 0, the keys k_i = LN_0(W_E[i]) W_K[0, h] (as in
key-orthogonality, no position, no bias) of the task's hypothesis frame, the group it declares (bijection: the
V value tokens; HMM: the O observation tokens) form per head a matrix K_h [n_tokens x d_head]; its
top-k right singular vectors U_h [d_head x k], with k = floor(min(n_tokens, d_head) / 2), span the
head's key-frame subspace. The overlap with the final model is ||U_h^T U_h,final||_F^2 / k (1 for the
same subspace, 0 for orthogonal ones) and the frame ratio is that overlap divided by k / d_head, the
expected overlap of two independent uniformly random k-dimensional subspaces of R^d_head: 1 at
chance, d_head / k for the final model itself. It is reported per head and as the mean over heads.
PRECISION: the entropy MAE in bits (as in calibration), and the R^2 of a linear read-out of the
Bayes posterior entropy (bits) from the final block's residual stream blocks.{L-1}.hook_resid_post
(before the final norm) at query positions: least squares with intercept (sklearn
LinearRegression) fitted on a random half of the query positions (split seeded by seed, the same for
every checkpoint) and scored on the other half (null when the entropy is constant there). SETTLING
STEP of a curve y_0..y_N over the checkpoint steps: with progress_i = (y_i - y_0) / (y_N - y_0),
the first checkpoint step whose progress is >= 0.9, i.e. the first step at which the curve has
covered 90% of its total change from the first checkpoint to the final one, in whichever direction
it moves; there is no interpolation between checkpoints, a curve that later falls back below 90%
still settled at that first step, and a curve with no total change settles at s_0. The frame curve
is the mean layer-0 key-frame ratio (for a task without hypothesis tokens, the attention
divergence averaged over layers) and the precision curve is log10 of the entropy MAE: precision
improves by factors, and on a linear scale the first fall from about 1 bit would count as 90% of all
progress however much sharper the model later gets. frame_settles_first
is true when the frame's settling step is strictly earlier than the precision's (the paper's
claim), false when it is the same step or later. The settling steps of the attention divergence and
of the read-out R^2 are reported as well. In the figures the step axis is logarithmic and step 0
is drawn at half the smallest positive checkpoint step (the hover text gives the true step).
UNCERTAINTY: the held-out sequences are resampled (95% percentile bootstrap, 2,000 resamples, seeded,
the same resampled sequences for every checkpoint), giving per checkpoint an interval of the entropy
MAE, the KL and the attention divergence (per layer and their mean): bands over the checkpoints in the
figures. The settling steps of the precision and attention curves are found again on each resample's
curves, giving intervals of steps, and frame_settles_first_share is the share of resamples in which the
frame settles strictly first. The key-frame ratio comes from the weights alone (no input is sampled),
so it has no sampling error and no interval; nor does the read-out R^2 here (left as a point).
""".split())

DESCRIPTIONS = {
    "intervals": "95% bootstrap intervals resampling the held-out sequences (the same resample for every "
                 "checkpoint): per checkpoint for entropy_mae_bits, kl_bits and attention_js_bits(_mean); the "
                 "settling steps found again on each resample's curves",
    "frame_settles_first_share": "share of the resamples in which the frame curve settles strictly before the "
                                 "precision curve (the key-frame ratio, weight geometry, is the same in all)",
    "frame": "key-frame ratio (weight geometry: no interval) and attention divergence from the final model",
    "n_queries": "query positions averaged over, in n_sequences sequences",
}

SETTLE_FRACTION = 0.9
CHUNK = 256  # sequences per forward pass


# -- helpers with known answers (tested on constructed inputs) ---------------------------------
def js_divergence_bits(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits between distributions on the last axis (0 log 0 = 0)."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)
    log_m = torch.log2(m.clamp_min(1e-300))

    def kl_to_m(x):
        return (x * (torch.log2(x.clamp_min(1e-300)) - log_m)).where(x > 0, torch.zeros_like(x)).sum(-1)

    return 0.5 * kl_to_m(p) + 0.5 * kl_to_m(q)


def top_subspace(vectors: torch.Tensor, k: int) -> torch.Tensor:
    """Orthonormal basis [d, k] of the top-k right singular subspace of ``vectors`` [n, d] (float64)."""
    _, _, vh = torch.linalg.svd(vectors.double(), full_matrices=False)
    return vh[:k].T


def subspace_overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    """||A^T B||_F^2 / k for orthonormal bases A, B [d, k]: 1 for one subspace, 0 for orthogonal ones."""
    k = a.shape[1]
    return float((a.T.double() @ b.double()).pow(2).sum() / k)


def frame_k(n_tokens: int, d_head: int) -> int:
    return min(n_tokens, d_head) // 2


def settling_step(steps: list[int], values: list, fraction: float = SETTLE_FRACTION) -> int | None:
    """First step at which ``values`` has covered ``fraction`` of its change from values[0] to values[-1].

    None if any value is missing; steps[0] if the curve does not change at all.
    """
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    first, last = values[0], values[-1]
    total = last - first
    if total == 0:
        return steps[0]
    for step, value in zip(steps, values):
        if (value - first) / total >= fraction:
            return step
    return steps[-1]  # unreachable: the last value has progress exactly 1


def settling_steps(steps: list[int], curves: torch.Tensor, fraction: float = SETTLE_FRACTION) -> torch.Tensor:
    """``settling_step`` of each row of ``curves`` [R, n_checkpoints] at once (finite values): [R] steps."""
    total = curves[:, -1:] - curves[:, :1]
    progress = torch.where(total == 0, torch.ones_like(curves), (curves - curves[:, :1]) / total)
    first = (progress >= fraction).double().argmax(1)  # the first checkpoint at 90%; the last one always is
    return torch.tensor(steps, dtype=torch.float64)[first]


# -- measuring one checkpoint ------------------------------------------------------------------
def pattern_name(layer: int) -> str:
    return act_name("pattern", layer)


def check_same_model(ckpt, model, path) -> None:
    """Checkpoints of one run share the architecture and model config; a mixed folder cannot be compared."""
    theirs, ours = (ckpt.arch, ckpt.config.to_dict()), (model.arch, model.config.to_dict())
    if theirs != ours:
        diff = (f"{ckpt.arch} vs {model.arch}" if ckpt.arch != model.arch else
                ", ".join(f"{k}={theirs[1].get(k)!r} vs {ours[1].get(k)!r}"
                          for k in sorted(theirs[1].keys() | ours[1].keys()) if theirs[1].get(k) != ours[1].get(k)))
        raise AnalysisError(f"frame-precision: {path.name} is another model than the analysed checkpoint ({diff}); "
                            f"the run folder mixes models")


@torch.no_grad()
def query_rows(model, batch) -> tuple[list[list[torch.Tensor]], np.ndarray]:
    """Per chunk and layer, the attention rows at query positions [N_chunk, H, T_k], and the final
    block's residual stream at query positions [N, d_model] (numpy, float64), in row-major order."""
    n_layers = model.cfg.n_layers
    resid = act_name("resid_post", n_layers - 1)
    names = [pattern_name(l) for l in range(n_layers)] + [resid]
    rows, features = [], []
    for i in range(0, len(batch), CHUNK):
        tokens, mask = batch.tokens[i:i + CHUNK], batch.query_mask[i:i + CHUNK]
        _, cache = model.run_with_cache(tokens, names_filter=names)
        # [B, H, Tq, Tk] -> [B, Tq, H, Tk] -> the query rows [N_chunk, H, Tk]
        rows.append([cache[pattern_name(l)].permute(0, 2, 1, 3)[mask].float() for l in range(n_layers)])
        features.append(cache[resid][mask].double().cpu())
    return rows, torch.cat(features).numpy()


def key_frames(model, ids: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Per layer-0 head, the top-k key-frame subspace [d_head, k]."""
    keys = key_vectors(model, 0, ids)
    return [top_subspace(keys[h], k) for h in range(keys.shape[0])]


def compute(model, n: int = 500, seed: int = 1234) -> Result:
    """Frame (attention and key-frame stability) and precision (calibration) over every checkpoint of the run."""
    # The run's checkpoint series and how to load one come with the model (its provenance), so this
    # analysis of training dynamics needs no file I/O of its own.
    found = list(model.provenance.checkpoints)
    load = model.provenance.load

    device = next(model.parameters()).device
    batch = eval_batch(model, n, seed)
    mask = batch.query_mask
    entropy = batch.bayes_entropy[mask].double().cpu().numpy()
    split = np.random.default_rng(seed).permutation(len(entropy))

    groups = model.task.hypothesis_tokens()
    group = model.task.frame  # the task declares its hypothesis frame (None: attention divergence only)
    d_head, n_layers, n_heads = model.cfg.d_head, model.cfg.n_layers, model.cfg.n_heads
    ids = groups[group] if group is not None else None
    k = frame_k(len(ids), d_head) if ids is not None else 0
    if ids is not None and k < 1:
        raise AnalysisError(f"frame-precision: the {group} group has {len(ids)} token(s) and d_head={d_head}, "
                            f"too few for a key-frame subspace (k = min(n_tokens, d_head) // 2 = 0)")

    steps = [step for step, _ in found]
    final = load(found[-1][1], device=str(device))
    if final.task.config() != model.task.config():
        raise AnalysisError(f"frame-precision: the run's final checkpoint is for {final.task!r}, not {model.task!r}")
    check_same_model(final, model, found[-1][1])
    final_rows, final_features = query_rows(final, batch)
    final_frames = key_frames(final, ids, k) if ids is not None else None

    js, ratio, mae, kl, r2 = [], [], [], [], []
    sequence = mask.nonzero()[:, 0].cpu()  # the sequence of each query row, in the order the rows come
    per_sequence = dict(entropy_mae_bits=[], kl_bits=[], js=[])  # per checkpoint, [n] or [n, L] sums
    for index, (step, path) in enumerate(found):
        ckpt = final if index == len(found) - 1 else load(path, device=str(device))
        if ckpt.task.config() != model.task.config():
            raise AnalysisError(f"frame-precision: {path.name} is for {ckpt.task!r}, not {model.task!r}; "
                                f"the run folder mixes tasks")
        check_same_model(ckpt, model, path)
        # the final checkpoint is compared with its own cached rows, so its divergence is exactly 0
        rows, features = (final_rows, final_features) if ckpt is final else query_rows(ckpt, batch)
        # per query row, the divergence summed over heads; per sequence, summed over its rows
        divergence = torch.stack([torch.cat([js_divergence_bits(a[l], b[l]).sum(-1).cpu()
                                             for a, b in zip(rows, final_rows)]) for l in range(n_layers)], 1)
        per_sequence["js"].append(torch.zeros(len(batch), n_layers, dtype=torch.float64).index_add_(
            0, sequence, divergence))
        js.append((divergence.sum(0) / (len(divergence) * n_heads)).tolist())
        if final_frames is not None:
            frames = key_frames(ckpt, ids, k)
            ratio.append([subspace_overlap(a, b) / (k / d_head) for a, b in zip(frames, final_frames)])
        sums = {}
        calib = measure(ckpt, batch, sums=sums)
        per_sequence["entropy_mae_bits"].append(sums["entropy_mae_bits"][0].cpu())
        per_sequence["kl_bits"].append(sums["kl_bits"][0].cpu())
        mae.append(calib["entropy_mae_bits"])
        kl.append(calib["kl_bits"])
        half = len(split) // 2  # fitted on one half of the query positions, scored on the other
        r2.append(readout_r2(features, entropy, split[:half], split[half:]))
        del ckpt

    js_mean = [sum(v) / len(v) for v in js]
    ratio_mean = [sum(v) / len(v) for v in ratio] if ratio else None
    settle = dict(
        frame_ratio=settling_step(steps, ratio_mean) if ratio_mean else None,
        attention_js=settling_step(steps, js_mean),
        entropy_mae=settling_step(steps, log_mae(mae)),
        entropy_r2=settling_step(steps, r2),
    )
    frame_curve = "frame_ratio" if ratio_mean else "attention_js"
    frame_step, precision_step = settle[frame_curve], settle["entropy_mae"]

    def earlier(a, b):
        return None if a is None or b is None else a < b

    counts = mask.sum(1).double().cpu()
    intervals, share = checkpoint_intervals(per_sequence, counts, n_heads, steps, frame_step if ratio_mean else None)

    metrics = dict(
        frame_settling_step=frame_step, precision_settling_step=precision_step,
        frame_settles_first=earlier(frame_step, precision_step),
        attention_settles_first=earlier(settle["attention_js"], precision_step),
        final_entropy_mae_bits=mae[-1], first_entropy_mae_bits=mae[0],
        final_step=steps[-1], model_step=getattr(model, "step", None), n_checkpoints=len(steps),
        frame_curve=frame_curve, precision_curve="log10 entropy_mae", settle_fraction=SETTLE_FRACTION,
        settling_steps=settle, steps=steps,
        frame=dict(
            group=group, n_tokens=None if ids is None else len(ids), d_head=d_head, k=k or None,
            null_overlap=k / d_head if k else None, max_ratio=d_head / k if k else None,
            overlap_ratio=ratio or None, overlap_ratio_mean=ratio_mean,
            attention_js_bits=js, attention_js_bits_mean=js_mean,
        ),
        precision=dict(entropy_mae_bits=mae, kl_bits=kl, entropy_r2=r2,
                       readout=act_name("resid_post", n_layers - 1)),
        n_layers=n_layers, n_heads=n_heads, n_sequences=len(batch), n_queries=int(mask.sum()), seed=seed,
        intervals=intervals, frame_settles_first_share=share,
    )
    return Result("frame-precision", DEFINITION, metrics, descriptions=DESCRIPTIONS, figures={
        "settling": settling_figure(metrics, model.task.name),
        "frame": frame_figure(metrics),
        "precision": precision_figure(metrics),
    })


def checkpoint_intervals(per_sequence: dict, counts: torch.Tensor, n_heads: int, steps: list[int],
                         frame_step: int | None) -> tuple[dict, float | None]:
    """Per checkpoint, intervals of the entropy MAE, KL and attention divergence (per layer, and their mean), and
    of the precision and attention settling steps, from per-sequence sums (``per_sequence``: per checkpoint, [n]
    or [n, L]) and query counts [n]: one resampling of sequences shared by every checkpoint. Also the share of
    resamples in which the frame settles strictly first (``frame_step``: the key-frame ratio's step, fixed by the
    weights; None: the frame curve is the attention divergence, resampled too)."""
    C, L = len(steps), per_sequence["js"][0].shape[1]
    columns = torch.cat([torch.stack(per_sequence["entropy_mae_bits"], 1), torch.stack(per_sequence["kl_bits"], 1),
                         torch.cat(per_sequence["js"], 1), counts[:, None]], 1).double()

    def statistic(resampled):  # [R, 2 C + C L + 1]
        mae, kl = (resampled[:, i * C:(i + 1) * C] / resampled[:, -1:] for i in range(2))
        js = resampled[:, 2 * C:-1].reshape(-1, C, L) / (resampled[:, -1:, None] * n_heads)
        js_mean = js.mean(2)
        precision = settling_steps(steps, torch.log10(mae.clamp_min(1e-12)))
        attention = settling_steps(steps, js_mean)
        first.append(precision > (attention if frame_step is None else frame_step))  # kept for the share
        return torch.cat([mae, kl, js_mean, js.reshape(-1, C * L), precision[:, None], attention[:, None]], 1)

    first = []
    bounds = bootstrap_sums(columns, statistic)
    share = first[0].double().mean().item()
    cut = lambda i, size=C: bounds[i * C:i * C + size]  # noqa: E731
    return dict(entropy_mae_bits=cut(0), kl_bits=cut(1), attention_js_bits_mean=cut(2),
                attention_js_bits=[bounds[3 * C + c * L:3 * C + (c + 1) * L] for c in range(C)],
                settling_steps=dict(entropy_mae=bounds[-2], attention_js=bounds[-1])), share


# -- figures -----------------------------------------------------------------------------------
def plot_x(steps: list[int]) -> list[float]:
    """Step positions on a log axis: step 0 is drawn at half the smallest positive step."""
    positive = [s for s in steps if s > 0]
    zero_at = min(positive) / 2 if positive else 1
    return [s if s > 0 else zero_at for s in steps]


def _x_title(steps: list[int]) -> str:
    x = plot_x(steps)
    note = f" (step 0 drawn at {x[0]:g})" if steps and steps[0] == 0 else ""
    return f"training step, log scale{note}"


def _curve(fig, steps, values, name, color, row=None, dash=None, width=2, unit="", group=None):
    """One curve over the checkpoints; curves sharing a ``group`` share one legend entry named after it."""
    kwargs = dict(row=row, col=1) if row else {}
    y = [float("nan") if v is None else v for v in values]
    shown = group is None or not any(t.legendgroup == group for t in fig.data)
    fig.add_scatter(x=plot_x(steps), y=y, name=group or name, mode="lines+markers",
                    line=dict(color=color, dash=dash, width=width), customdata=steps, legendgroup=group or name,
                    showlegend=shown,
                    hovertemplate=f"{name}<br>step %{{customdata}}<br>%{{y:.4g}}{unit}<extra></extra>", **kwargs)


def _band(fig, steps, bounds, name, color, row=None):
    """A shaded 95% band over the checkpoints, from per-checkpoint [low, high] intervals."""
    style.interval_band(fig, plot_x(steps), bounds, color, group=name, **(dict(row=row, col=1) if row else {}))


def _band_note(metrics: dict) -> str:
    return (f"bands: 95% bootstrap intervals over {metrics['n_sequences']:,} sequences "
            f"({metrics['n_queries']:,} queries)")


def _settled(fig, steps, values, settle, name, color, row=None):
    """A star at the curve's settling step."""
    if settle is None:
        return
    kwargs = dict(row=row, col=1) if row else {}
    i = steps.index(settle)
    fig.add_scatter(x=[plot_x(steps)[i]], y=[values[i]], mode="markers", legendgroup=name, showlegend=False,
                    marker=dict(symbol="star", size=16, color=color, line=dict(color="black", width=1)),
                    hovertemplate=f"{name} settles (90% of its change)<br>step {settle}<extra></extra>", **kwargs)


COLORS = dict(frame_ratio="#1f77b4", attention_js="#17becf", entropy_mae="#d62728", entropy_r2="#ff7f0e")
LABELS = dict(frame_ratio="key-frame ratio (layer 0)", attention_js="attention JS divergence",
              entropy_mae="entropy MAE (log10)", entropy_r2="entropy read-out R²")


def log_mae(mae: list[float]) -> list[float]:
    """The precision curve: log10 of the entropy MAE (floored at 1e-12 bits)."""
    return [math.log10(max(m, 1e-12)) for m in mae]


def settling_figure(metrics: dict, task_name: str) -> go.Figure:
    steps = metrics["steps"]
    curves = dict(frame_ratio=metrics["frame"]["overlap_ratio_mean"], attention_js=metrics["frame"]["attention_js_bits_mean"],
                  entropy_mae=log_mae(metrics["precision"]["entropy_mae_bits"]), entropy_r2=metrics["precision"]["entropy_r2"])
    fig = go.Figure()
    for key, values in curves.items():
        if not values or any(v is None for v in values):
            continue
        total = values[-1] - values[0]
        progress = [(v - values[0]) / total if total else 1.0 for v in values]
        is_frame = key in ("frame_ratio", "attention_js")
        _curve(fig, steps, progress, LABELS[key], COLORS[key], dash=None if is_frame else "dot")
        _settled(fig, steps, progress, metrics["settling_steps"][key], LABELS[key], COLORS[key])
    x = plot_x(steps)
    fig.add_scatter(x=[x[0], x[-1]], y=[SETTLE_FRACTION] * 2, mode="lines", name="90% of the total change",
                    line=dict(color="gray", dash="dash", width=1), hoverinfo="skip")
    verdict = {True: "the frame settles first", False: "the frame does not settle first",
               None: "undetermined"}[metrics["frame_settles_first"]]
    fig.update_layout(
        title=f"{task_name}: fraction of each curve's total change over training — {verdict}<br>"
              f"<sup>frame settles at step {metrics['frame_settling_step']}, precision (log10 entropy MAE) at step "
              f"{metrics['precision_settling_step']} (95% {_steps(metrics['intervals']['settling_steps']['entropy_mae'])}, "
              f"over {metrics['n_sequences']:,} resampled sequences; the frame settles first in "
              f"{100 * metrics['frame_settles_first_share']:.0f}% of resamples); stars mark the settling steps</sup>",
        # a y title no taller than the plot (a longer one ran up into the subtitle); the title says what it is of
        xaxis_title=_x_title(steps), xaxis_type="log", yaxis_title="fraction of its total change",
        width=820, height=480)
    return fig


def _steps(bounds: list) -> str:
    return f"{bounds[0]:.0f}" if bounds[0] == bounds[1] else f"{bounds[0]:.0f}-{bounds[1]:.0f}"


def frame_figure(metrics: dict) -> go.Figure:
    steps, frame = metrics["steps"], metrics["frame"]
    has_ratio = frame["overlap_ratio"] is not None
    titles = ([f"layer-0 key-frame ratio to the final model ({frame['group']}, k={frame['k']} of d_head={frame['d_head']})"]
              if has_ratio else []) + ["attention-pattern JS divergence from the final model"]
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.12)
    row = 1
    if has_ratio:
        per_head = list(zip(*frame["overlap_ratio"]))
        for h, values in enumerate(per_head):
            _curve(fig, steps, list(values), f"L0H{h}", "#9ecae1", row=row, width=1, group="single heads (layer 0)")
        _curve(fig, steps, frame["overlap_ratio_mean"], "mean over heads", COLORS["frame_ratio"], row=row, width=3)
        _settled(fig, steps, frame["overlap_ratio_mean"], metrics["settling_steps"]["frame_ratio"], "mean over heads",
                 COLORS["frame_ratio"], row=row)
        x = plot_x(steps)
        for level, label in ((1.0, "random-subspace null"), (frame["max_ratio"], "identical subspace (d_head/k)")):
            fig.add_scatter(x=[x[0], x[-1]], y=[level, level], mode="lines", name=label, row=row, col=1,
                            line=dict(color="gray", dash="dash", width=1), hoverinfo="skip")
        fig.update_yaxes(title_text="overlap / (k/d_head)", row=row, col=1)
        row += 1
    palette = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#1f77b4"]
    for l, values in enumerate(zip(*frame["attention_js_bits"])):
        _curve(fig, steps, list(values), f"layer {l}", palette[l % len(palette)], row=row, unit=" bits")
    _curve(fig, steps, frame["attention_js_bits_mean"], "mean over layers", COLORS["attention_js"], row=row, width=3,
           unit=" bits")
    _band(fig, steps, metrics["intervals"]["attention_js_bits_mean"], "mean over layers", COLORS["attention_js"], row=row)
    if metrics["settling_steps"]["attention_js"] is not None:
        i = steps.index(metrics["settling_steps"]["attention_js"])
        fig.add_scatter(x=[plot_x(steps)[i]], y=[frame["attention_js_bits_mean"][i]], mode="markers",
                        name="layer mean settles", row=row, col=1,
                        marker=dict(symbol="star", size=16, color=COLORS["attention_js"], line=dict(color="black", width=1)),
                        hovertemplate="mean over layers settles<br>step %{customdata}<extra></extra>",
                        customdata=[steps[i]])
    fig.update_yaxes(title_text="JS divergence (bits)", row=row, col=1)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text=_x_title(steps), row=row, col=1)
    fig.update_layout(title="frame: how far each checkpoint's attention frame is from the final model's<br><sup>"
                            + _band_note(metrics) + "; the key-frame ratio is weight geometry: no band</sup>",
                      width=820, height=360 * len(titles))
    return fig


def precision_figure(metrics: dict) -> go.Figure:
    steps, prec = metrics["steps"], metrics["precision"]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=["entropy MAE against the Bayes posterior",
                                        f"R² of a linear read-out of the Bayes entropy from {prec['readout']}"])
    _curve(fig, steps, prec["entropy_mae_bits"], LABELS["entropy_mae"], COLORS["entropy_mae"], row=1, unit=" bits")
    _band(fig, steps, metrics["intervals"]["entropy_mae_bits"], LABELS["entropy_mae"], COLORS["entropy_mae"], row=1)
    _settled(fig, steps, prec["entropy_mae_bits"], metrics["settling_steps"]["entropy_mae"], LABELS["entropy_mae"],
             COLORS["entropy_mae"], row=1)
    _curve(fig, steps, prec["entropy_r2"], LABELS["entropy_r2"], COLORS["entropy_r2"], row=2)
    if all(v is not None for v in prec["entropy_r2"]):
        _settled(fig, steps, prec["entropy_r2"], metrics["settling_steps"]["entropy_r2"], LABELS["entropy_r2"],
                 COLORS["entropy_r2"], row=2)
    if all(v is not None and v > 0 for v in prec["entropy_mae_bits"]):
        fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(title_text="bits" + (" (log)" if fig.layout.yaxis.type == "log" else ""), row=1, col=1)
    fig.update_yaxes(title_text="held-out R²", row=2, col=1)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text=_x_title(steps), row=2, col=1)
    fig.update_layout(title="precision: calibration of each checkpoint (stars: 90% settling steps)<br><sup>"
                            + _band_note(metrics) + "; the R² is a point</sup>",
                      width=820, height=720)
    return fig


ANALYSIS = Analysis(
    "frame-precision", "over a run's checkpoints: does the hypothesis frame settle before the posterior gets "
    "precise?", DEFINITION, compute, options=(n_option(500), seed_option()), requires=("attention", "series"), order=7)
