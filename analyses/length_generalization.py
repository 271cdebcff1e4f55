"""Length generalisation: calibration at sequence lengths beyond the training length.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import plotly.graph_objects as go

import torch

from tasks import ConfigError

from . import style
from .base import Analysis, AnalysisError, Option, Result, held_out_batch, n_option, seed_option
from .belief_clusters import PALETTE
from .calibration import measure
from .intervals import bootstrap_sums

DEFINITION = " ".join("""
 For each value n of the task's length setting (bijection L, HMM K, regression n,
recall queries) the task is rebuilt with that length and the model's calibration is measured as in
``calibration`` (entropy MAE in bits over the answer classes, KL(Bayes||model)) on held-out
sequences. Reported per length: the MAE over all query positions (what the paper's figure
averaged) and over only the query positions past the training length (the honest extrapolation
number), plus the per-query-position error curve with the training boundary marked. Learned
absolute positions exist only up to the model's n_ctx; a length that needs more is refused with
the n_ctx to train with (rows past the training length are then present but never trained, as in
the paper). Uncertainty: each number (and the error at each query position, the bands of the curve figure)
has a 95% percentile bootstrap interval resampling whole sequences of that length (2,000 resamples; the
queries of one sequence share its hidden truth); n_sequences sequences per length, n_queries and
n_beyond_training_queries stated per length.
""".split())


def parse_lengths(spec: str, trained: int) -> list[int]:
    if not spec:
        return sorted({trained, round(trained * 1.5), round(trained * 2.5)})
    try:
        lengths = [int(part) for part in str(spec).split(",") if part.strip()]
    except ValueError:
        raise AnalysisError(f"--lengths must be comma-separated integers, got {spec!r}") from None
    if not lengths or min(lengths) < 1:
        raise AnalysisError(f"--lengths must be positive integers, got {spec!r}")
    return sorted(set(lengths))


def variant_at(task, length: int, n_ctx: int | None):
    """The task rebuilt at ``length``; AnalysisError when the task or the model's positions refuse it."""
    try:
        variant = task.with_length(length)
    except ConfigError as err:
        raise AnalysisError(f"{task.length_setting}={length}: {err}") from None
    if n_ctx is not None and variant.seq_len > n_ctx:  # recurrent models take any length
        raise AnalysisError(
            f"{task.length_setting}={length} needs {variant.seq_len} positions but the model has n_ctx={n_ctx}; "
            f"retrain with -M n_ctx={variant.seq_len} to size the position table for it")
    return variant


def position_intervals(per_query: dict, first_beyond: int) -> tuple[list, list | None]:
    """95% bootstrap intervals over sequences of the error at each query column, and of the mean of the columns from
    ``first_beyond`` on (None without any): ``calibration.measure``'s ``per_query``, one resampling for both."""
    error, asked = per_query["abs_error"], per_query["asked"]
    Q = error.shape[1]

    def statistic(sums):
        by_column = sums[:, :Q] / sums[:, Q:]
        return torch.cat([by_column, by_column[:, first_beyond:].mean(1, keepdim=True)], 1)

    bounds = bootstrap_sums(torch.cat([error, asked], 1), statistic)
    return bounds[:Q], bounds[Q] if first_beyond < Q else None


def compute(model, lengths: str = "", n: int = 1000, seed: int = 1234) -> Result:
    """Calibration of ``model`` at each length in ``lengths`` (default: the training length, 1.5x and
    2.5x, leaving out those the task or the model's position table cannot take, with the reason)."""
    task = model.task
    trained = task.config()[task.length_setting]
    n_ctx = model.cfg.n_ctx
    trained_queries = int(held_out_batch(task, 1, seed).query_mask[0].sum())
    per_length, skipped = {}, {}
    for length in parse_lengths(lengths, trained):
        try:
            variant = variant_at(task, length, n_ctx)
        except AnalysisError as err:
            if lengths:  # lengths the user asked for must all run
                raise
            skipped[str(length)] = str(err)
            continue
        per_query = {}
        numbers = measure(model, held_out_batch(variant, n, seed).to(next(model.parameters()).device),
                          intervals=True, per_query=per_query)
        errors = numbers["per_position"]["abs_error_bits"]
        beyond = errors[trained_queries:]
        by_position, beyond_interval = position_intervals(per_query, trained_queries)
        per_length[str(length)] = dict(
            entropy_mae_bits=numbers["entropy_mae_bits"], kl_bits=numbers["kl_bits"],
            beyond_training_mae_bits=sum(beyond) / len(beyond) if beyond else None,
            abs_error_bits=errors, bayes_entropy_bits=numbers["per_position"]["bayes_entropy_bits"],
            intervals=dict(entropy_mae_bits=numbers["intervals"]["entropy_mae_bits"],
                           kl_bits=numbers["intervals"]["kl_bits"], beyond_training_mae_bits=beyond_interval,
                           abs_error_bits=by_position),
            n_sequences=numbers["n_sequences"], n_queries=numbers["n_queries"],
            n_beyond_training_queries=int(per_query["asked"][:, trained_queries:].sum()),
        )
    metrics = dict(length_setting=task.length_setting, trained_length=trained, trained_queries=trained_queries,
                   n_ctx=n_ctx, n_sequences=n, seed=seed, lengths=per_length, skipped_lengths=skipped)
    return Result("length-generalization", DEFINITION, metrics, {
        "error-by-position": curve_figure(per_length, trained_queries, task.length_setting, task.name, n),
        "mae-by-length": bar_figure(per_length, task.length_setting, n),
    }, descriptions={
        "entropy_mae_bits": "per length: mean |H(model) - H(Bayes)| over all query positions, bits",
        "beyond_training_mae_bits": "per length: the mean over the query positions past the training length of "
                                    "each position's MAE, bits",
        "intervals": "per length: 95% percentile bootstrap interval of entropy_mae_bits, kl_bits, "
                     "beyond_training_mae_bits and of each position's error (abs_error_bits), resampling whole "
                     "sequences (n_sequences of that length; 2,000 resamples)",
    })


def curve_figure(per_length: dict, boundary: int, setting: str, task_name: str, n: int) -> go.Figure:
    fig = go.Figure()
    for i, (length, numbers) in enumerate(per_length.items()):
        errors, color, name = numbers["abs_error_bits"], PALETTE[i % len(PALETTE)], f"{setting}={length}"
        x = list(range(1, len(errors) + 1))
        style.interval_band(fig, x, numbers["intervals"]["abs_error_bits"], color, group=name)
        fig.add_scatter(x=x, y=errors, mode="lines+markers", name=name, legendgroup=name, line_color=color)
    fig.update_layout(title=f"{task_name}: |H model - H Bayes| by query position<br><sup>bands: 95% bootstrap "
                            f"intervals over the {n:,} sequences of each length</sup>", xaxis_title="query index",
                      yaxis_title="bits (log scale)", yaxis_type="log", width=760, height=440)
    style.reference_line(fig, boundary + 0.5, "training length", axis="x")
    return fig


def bar_figure(per_length: dict, setting: str, n: int) -> go.Figure:
    names = [f"{setting}={k}" for k in per_length]
    fig = go.Figure()
    for key, name in (("entropy_mae_bits", "all positions"), ("beyond_training_mae_bits", "past training length")):
        values = [v[key] for v in per_length.values()]
        fig.add_bar(x=names, y=values, name=name,
                    error_y=style.error_bars(values, [v["intervals"][key] for v in per_length.values()]))
    fig.update_layout(title=f"Entropy MAE by evaluation length<br><sup>bars: 95% bootstrap intervals over the {n:,} "
                            f"sequences of each length</sup>", xaxis_title=f"evaluation length ({setting})",
                      yaxis_title="bits", barmode="group",
                      width=640, height=420)
    return fig


ANALYSIS = Analysis(
    "length-generalization", "calibration at sequence lengths other than the trained one, per position",
    DEFINITION, compute,
    options=(Option("lengths", "", "comma-separated values of the task's length setting (default: the trained "
                                   "length, 1.5x and 2.5x)"), n_option(1000), seed_option()),
    requires=("length-setting",), order=2)
