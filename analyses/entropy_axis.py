"""The entropy axis, ablated: is the direction that encodes the posterior entropy causal for the answer?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
import torch

from models.base import act_name

from . import activations
from .base import Analysis, AnalysisError, Option, Result
from .intervals import bootstrap_sums
from sklearn.linear_model import RidgeCV

from .base import RIDGE_ALPHAS, readout_r2
from .style import error_bars
from .value_manifold import bootstrap_intervals, correlation, pca_share_and_r, split_halves

DEFINITION = " ".join("""
 On a language model and a prompt task, the residual stream blocks.l.hook_resid_post at each prompt's
last position (l = --layer, -1 for the last layer) gives the entropy axis: the unit vector of the
ridge read-out (scikit-learn RidgeCV, penalty from 1e-3 to 1e3 by leave-one-out, with intercept) of the
Bayes posterior entropy from those activations, fitted on a seeded random half of the prompts. Ablating an axis
removes its component from that residual stream at every position of every prompt (x <- x - (x.a)a)
and runs the rest of the model on. Measured intact, with the entropy axis ablated, and with each of
`controls` random unit axes ablated (seeded; mean and standard deviation over them): the manifold at
layer l (held-out R² of the same kind of ridge read-out refitted on the ablated activations, |Pearson r| of PC1
with the entropy, PC1 + PC2's share of the variance) and the calibration of the answer (the model's
next-token distribution renormalised over the two answer tokens, against the Bayes predictive:
entropy MAE and KL in bits). Paper III reports that ablating the entropy axis destroys the manifold
but not calibration; a random axis is the control that says what removing any one direction does.
Intervals (95% percentile bootstrap, seeded), intact and entropy axis ablated: the calibration numbers and
the paired change ablated - intact resample prompts (wind-tunnel prompts: the held-out sequences they were
cut from; 2,000 resamples); the read-out R² (the read-outs fitted once), its paired drop and the held-out
|r| of the axis resample the scoring half's units (2,000 resamples); the PCA numbers resample prompts and
refit the PCA (200 resamples, value-manifold's intervals). The random axes' mean ± sd is the spread over
the control axes, not an interval.
""".split())

DESCRIPTIONS = {
    "intact": "manifold and calibration numbers of the unablated model at the layer",
    "entropy_axis": "the same with the entropy axis projected out",
    "random_axes": "the same with each random axis projected out: mean and sd over the controls (a spread, not "
                   "an interval)",
    "intervals": "95% bootstrap intervals: calibration and calibration_change_bits over resampled prompts (wind-"
                 "tunnel prompts: their held-out sequences), paired; readout_r2, readout_r2_drop (paired) and "
                 "axis_entropy_pearson_abs_held_out over the scoring half's resampled units, read-outs fitted once; "
                 "pc12_variance and pc1_pearson_abs over 200 resamples of the prompts, PCA refitted",
    "calibration_change_bits": "entropy MAE ablated - intact, bits, on the same prompts",
    "readout_r2_drop": "held-out read-out R² intact - ablated",
    "n_sequences": "units the intervals resample: held-out sequences (wind-tunnel prompts) or prompts",
}


def entropy_axis(X: np.ndarray, entropy: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """The unit direction of the ridge read-out of ``entropy`` from ``X`` on the ``fit`` rows."""
    w = RidgeCV(alphas=RIDGE_ALPHAS).fit(X[fit], entropy[fit]).coef_
    norm = np.linalg.norm(w)
    if norm == 0:
        raise AnalysisError("the entropy read-out is zero: no entropy axis to ablate")
    return w / norm


def measure(lm, prompt_set, layer: int, fit, test, direction: np.ndarray | None,
            last: np.ndarray | None = None) -> tuple[dict, np.ndarray, tuple, torch.Tensor]:
    """Manifold and calibration numbers with ``direction`` projected out at ``layer`` (None: intact), the
    layer's activations at the prompts' last positions, the per-prompt calibration terms (|gap|, KL) and the
    answer distributions. ``last``, the intact activations of the model's last layer, lets an axis projected
    out there skip the forward pass (``decode_last``)."""
    name = act_name("resid_post", layer)
    entropy = prompt_set.posterior_entropy.numpy()
    if direction is None:
        probs, caught = activations.last_positions(lm, prompt_set, [name])
        X = torch.stack(caught[name]).numpy()
    elif last is not None:
        X = last - (last @ direction)[:, None] * direction
        probs = decode_last(lm, X, prompt_set.answers)
    else:
        with activations.projected_out(lm, layer, torch.from_numpy(direction)):
            probs, caught = activations.last_positions(lm, prompt_set, [name])
        X = torch.stack(caught[name]).numpy()
    share, r = pca_share_and_r(X, entropy)
    calibration = activations.calibration(probs, prompt_set)
    return dict(readout_r2=readout_r2(X, entropy, fit, test, ridge=True), pc1_pearson_abs=r, pc12_variance=share,
                entropy_mae_bits=calibration["entropy_mae_bits"], kl_bits=calibration["kl_bits"],
                along_axis=None if direction is None else float(np.abs(X @ direction).max())), X, \
        activations.calibration_terms(probs, prompt_set), probs


@torch.no_grad()
def decode_last(lm, X: np.ndarray, answers) -> torch.Tensor:
    """The answer distribution [n, answers] (float64) from the last block's output at the prompts' last positions,
    ``X`` [n, d]: after its last block a causal model only normalises each position and unembeds it, so an axis
    projected out there changes the answer through these two alone, and ten control axes cost two small matrix
    products instead of ten forward passes. ``on_language_model`` uses it only where it gives the model's own
    intact answer back."""
    model = lm.model
    logits = activations.decode_last(model, torch.from_numpy(X).to(device=activations.device_of(lm),
                                                                   dtype=model.cfg.dtype))
    return torch.softmax(logits[:, list(answers)].double(), -1).cpu()


def last_layer_shortcut(lm, layer: int, X: np.ndarray, probs: torch.Tensor, answers) -> np.ndarray | None:
    """``X`` when ``layer`` is the model's last and decoding it gives the forward pass's answers (to 1e-6: a model
    that does more after its last block, a logit soft-cap say, fails this and keeps its forward passes), else None."""
    if layer != lm.model.cfg.n_layers - 1:
        return None
    try:
        decoded = decode_last(lm, X, answers)
    except (AttributeError, RuntimeError):  # no ln_final/unembed of the usual shape: the forward passes it is
        return None
    return X if torch.allclose(decoded, probs, atol=1e-6) else None


KEYS = ("readout_r2", "pc1_pearson_abs", "pc12_variance", "entropy_mae_bits", "kl_bits")


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, layer: int,
                      controls: int) -> Result:
    n_layers = lm.model.cfg.n_layers
    if not -n_layers <= layer < n_layers:
        raise AnalysisError(f"--layer {layer} out of range: {lm.name} has {n_layers} layers")
    layer %= n_layers
    prompt_set = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    entropy = prompt_set.posterior_entropy.numpy()
    if np.ptp(entropy) == 0:
        raise AnalysisError(f"every prompt has the same posterior entropy ({entropy[0]:.4g} bits): there is no "
                            f"entropy axis to find")
    fit, test = split_halves(len(entropy), seed)
    intact, X, intact_terms, intact_probs = measure(lm, prompt_set, layer, fit, test, None)
    last = last_layer_shortcut(lm, layer, X, intact_probs, prompt_set.answers)
    axis = entropy_axis(X, entropy, fit)
    ablated, X_ablated, ablated_terms, _ = measure(lm, prompt_set, layer, fit, test, axis, last)
    rng = np.random.default_rng(seed)
    randoms = []
    for _ in range(controls):
        v = rng.standard_normal(len(axis))
        randoms.append(measure(lm, prompt_set, layer, fit, test, v / np.linalg.norm(v), last)[0])
    summary = {key: dict(mean=_mean([r[key] for r in randoms]), std=_std([r[key] for r in randoms]))
               for key in KEYS}
    metrics = dict(layer=layer, intact={k: intact[k] for k in KEYS}, entropy_axis={k: ablated[k] for k in KEYS},
                   random_axes=summary, n_controls=controls, n_prompts=len(entropy),
                   readout_r2_drop=_diff(intact["readout_r2"], ablated["readout_r2"]),
                   readout_r2_drop_random=_diff(intact["readout_r2"], summary["readout_r2"]["mean"]),
                   calibration_change_bits=ablated["entropy_mae_bits"] - intact["entropy_mae_bits"],
                   calibration_change_random_bits=(None if summary["entropy_mae_bits"]["mean"] is None else
                                                   summary["entropy_mae_bits"]["mean"] - intact["entropy_mae_bits"]),
                   axis_entropy_pearson_abs_held_out=_abs(correlation(X[test] @ axis, entropy[test])),
                   max_component_left_along_axis=ablated["along_axis"],
                   n_sequences=activations.n_sequences(prompt_set),
                   bootstrap_unit="prompts" if prompt_set.sequence is None else "sequences")
    metrics["intervals"] = ablation_intervals(prompt_set, intact_terms, ablated_terms, held_out_intervals(
        X, X_ablated, axis, entropy, fit, test, prompt_set), {"intact": X, "entropy_axis": X_ablated}, seed)
    return Result("entropy-axis", DEFINITION, metrics,
                  {"ablation": figure(metrics, f"{prompt_set.description}, layer {layer}")}, descriptions=DESCRIPTIONS)


def held_out_intervals(X: np.ndarray, X_ablated: np.ndarray, axis: np.ndarray, entropy: np.ndarray, fit, test,
                       prompt_set) -> dict:
    """Intervals of the held-out read-out R² intact and ablated, their paired drop and |r| of the axis with the
    entropy, resampling the scoring half's units: each number is a function of sums over the scoring prompts
    (squared errors of read-outs fitted once, and moments of the entropy and the axis projection)."""
    y = entropy[test]
    if np.ptp(y) == 0:  # R² undefined, as readout_r2 says
        return {}
    errors = [(y - RidgeCV(alphas=RIDGE_ALPHAS).fit(x[fit], entropy[fit]).predict(x[test])) ** 2
              for x in (X, X_ablated)]
    a = X[test] @ axis
    columns = np.zeros((len(entropy), 8))
    columns[test] = np.stack([*errors, y, y * y, a, a * a, a * y, np.ones_like(y)], 1)
    sums = activations.unit_sums(torch.from_numpy(columns), prompt_set)
    sums = sums[sums[:, -1] > 0]  # units with no scoring prompt

    def statistic(s):
        e_intact, e_ablated, sy, syy, sa, saa, say, m = s.T
        sst = syy - sy ** 2 / m  # sum of squares about the resample's own mean, as r2_score takes it
        r2, r2_ablated = 1 - e_intact / sst, 1 - e_ablated / sst
        r = (say - sa * sy / m) / ((saa - sa ** 2 / m) * sst).sqrt()
        return torch.stack([r2, r2_ablated, r2 - r2_ablated, r.abs()], 1)

    bounds = bootstrap_sums(sums, statistic)
    return dict(readout_r2=bounds[:2], readout_r2_drop=bounds[2], axis_entropy_pearson_abs_held_out=bounds[3])


def ablation_intervals(prompt_set, intact: tuple, ablated: tuple, held_out: dict, streams: dict, seed: int) -> dict:
    """Every interval of the intact and entropy-axis-ablated numbers (see DESCRIPTIONS["intervals"])."""
    (gap, kl), (gap_ablated, kl_ablated) = intact, ablated
    calibration = activations.mean_intervals(torch.stack([gap, kl, gap_ablated, kl_ablated, gap_ablated - gap], 1),
                                             prompt_set)
    entropy = prompt_set.posterior_entropy.numpy()
    out = {}
    for i, (name, X) in enumerate(streams.items()):
        pca = bootstrap_intervals(X, entropy, PCA_RESAMPLES, seed)
        out[name] = dict(readout_r2=held_out["readout_r2"][i] if held_out else None,
                         pc1_pearson_abs=pca["pc1_pearson_abs_ci"], pc12_variance=pca["pc12_variance_ci"],
                         entropy_mae_bits=calibration[2 * i], kl_bits=calibration[2 * i + 1])
    out.update(calibration_change_bits=calibration[4], readout_r2_drop=held_out.get("readout_r2_drop"),
               axis_entropy_pearson_abs_held_out=held_out.get("axis_entropy_pearson_abs_held_out"))
    return out


PCA_RESAMPLES = 200  # each refits a PCA: value-manifold's default number of resamples


def _abs(x):
    return None if x is None else abs(x)


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _std(values):
    values = [v for v in values if v is not None]
    return float(np.std(values)) if values else None


def _diff(a, b):
    return None if a is None or b is None else a - b


def figure(metrics: dict, subject: str) -> go.Figure:
    """Manifold numbers (left) and calibration in bits (right, log scale): intact, entropy axis, random axes."""
    labels = {"readout_r2": "read-out R²", "pc1_pearson_abs": "|r| PC1, entropy", "pc12_variance": "PC1+PC2 share",
              "entropy_mae_bits": "entropy MAE", "kl_bits": "KL"}
    random = metrics["random_axes"]
    value = lambda v: float("nan") if v is None else v  # noqa: E731
    fig = make_subplots(rows=1, cols=2, subplot_titles=("manifold at the layer", "calibration of the answer (bits)"),
                        horizontal_spacing=0.12)
    for col, keys in ((1, KEYS[:3]), (2, KEYS[3:])):
        x = [labels[k] for k in keys]
        for name, key, color in (("intact", "intact", "#1f77b4"), ("entropy axis ablated", "entropy_axis", "#d62728")):
            numbers, bounds = metrics[key], metrics["intervals"][key]
            fig.add_bar(x=x, y=[value(numbers[k]) for k in keys], name=name, marker_color=color, legendgroup=name,
                        error_y=error_bars([numbers[k] for k in keys], [bounds[k] for k in keys]),
                        showlegend=col == 1, row=1, col=col)
        name = f"random axis ablated (mean ± sd of {metrics['n_controls']})"
        fig.add_bar(x=x, y=[value(random[k]["mean"]) for k in keys], name=name, marker_color="#7f7f7f",
                    error_y=dict(type="data", array=[random[k]["std"] or 0.0 for k in keys], visible=True),
                    legendgroup=name, showlegend=col == 1, row=1, col=col)
    fig.update_xaxes(title_text="measure")
    fig.update_yaxes(title_text="value", row=1, col=1)
    fig.update_yaxes(type="log", title_text="bits", row=1, col=2)
    fig.update_layout(title=f"{subject}: the entropy axis ablated, against random axes<br><sup>bars: 95% bootstrap "
                            f"intervals over {metrics['n_sequences']:,} {metrics['bootstrap_unit']} "
                            f"({metrics['n_prompts']:,} prompts); grey: mean ± sd over the random axes</sup>",
                      barmode="group",
                      width=980, height=480)
    return fig


ANALYSIS = Analysis(
    "entropy-axis", "project the posterior-entropy axis out of the residual stream: manifold and calibration "
    "against random axes (language models)", DEFINITION, None, order=21,
    on_language_model=on_language_model, language_definition=DEFINITION,
    language_options=activations.language_options(
        Option("layer", -1, "layer whose residual stream is ablated (-1: the last)", low=-1000, high=1000),
        Option("controls", 10, "random axes ablated as controls", low=0, high=1000)))
