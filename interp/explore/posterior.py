"""The wind-tunnel explorer's posterior views: per query position the model's answer distribution beside the
exact Bayes posterior, model vs Bayes entropy with the gap (``calibration.measure`` and its staircase/error
figures), calibration on held-out sequences (intact and as ablated), a continuous task's predictive beside
Bayes's, and the task's latent truth of the sequence (its tables, its true class at each query).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output, html, no_update
from plotly.subplots import make_subplots

from analyses.base import held_out_batch
from analyses.calibration import error_figure, ratio_interval, staircase_figure

from .common import REFUSED, graph, message_figure, page_figure, panel, with_interval
from .computed import held_out_calibration, held_out_sums, sequence_numbers
from .hooks import CONTROLS, ablation_text, chosen_ablations
from .page import View


TABLES_WIDTH = 0.86  # the share of the latent view's width its tables take: the rest is their colour bar's


def latent_height(tables: bool, path) -> int:
    """The latent view's height: the tables above the path where it has both, one row where not."""
    return 640 if tables and path else 380


def posterior_views(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
    """Posterior heat maps and the per-position entropies of one sequence, and held-out calibration; with
    ablations, the intact model's entropies drawn beside the ablated ones."""
    seq = sequence_numbers(state, index, tokens, seed, choices)
    batch, curves, probs = seq["batch"], seq["curves"], seq["probs"]
    held_out = held_out_calibration(state, index, choices)
    intact = held_out_calibration(state, index, [])
    mark = " (ablated)" if choices else ""
    views = dict(
        entropy=staircase_figure(curves["per_position"], f"this sequence: model{mark} vs Bayes entropy"
                                 f"<br><sup>MAE {curves['entropy_mae_bits']:.4f} bits</sup>",  # fits half a page
                                 intact=sequence_numbers(state, index, tokens, seed, [])["curves"]["per_position"]
                                 if choices else None),
        gap=error_figure(curves["per_position"]),
        calibration=staircase_figure(held_out["per_position"], f"{state.n_calibration} held-out sequences{mark}"
                                     "<br><sup>MAE " + with_interval(held_out["entropy_mae_bits"],
                                                                     held_out["intervals"]["entropy_mae_bits"],
                                                                     unit=" bits") + "</sup>",  # fits half a page
                                     intact=intact["per_position"] if choices else None),
        summary=calibration_summary(state, index, choices),
    )
    for fig in views.values():
        if isinstance(fig, go.Figure):
            fig.update_layout(width=None, height=320, margin=dict(t=60, b=40))
    views["posterior"] = (posterior_figure(state, batch, probs, tokens, choices) if probs is not None else
                          message_figure("a continuous task: its predictive is a Gaussian; see the entropies"))
    views["latent"] = (predictive_figure(state, batch, seq["predictive"], tokens) if seq["predictive"] is not None
                       else latent_figure(state, batch, probs, tokens))
    for fig in views.values():
        if isinstance(fig, go.Figure):
            page_figure(fig)
    return views


def calibration_summary(state, index: int, choices: list[str]) -> str:
    """The held-out calibration in words, each number with calibration's 95% bootstrap interval over the
    sequences and how many sequences and queries; with ablations, the intact model's and the paired interval
    of MAE ablated / intact (``calibration.ratio_interval``, as head- and layer-ablation report it)."""
    def numbers(m):
        mae, kl = ((m[key], m["intervals"][key]) for key in ("entropy_mae_bits", "kl_bits"))
        return f"entropy MAE {with_interval(*mae, unit=' bits')}, KL {with_interval(*kl, unit=' bits')}"

    held_out = held_out_calibration(state, index, choices)
    text = (f"held-out calibration ({held_out['n_sequences']:,} sequences, {held_out['n_queries']:,} queries; "
            f"95% bootstrap intervals over the sequences): {numbers(held_out)}")
    if not choices:
        return text
    intact = held_out_calibration(state, index, [])
    ratio = ratio_interval(held_out_sums(state, index, choices), held_out_sums(state, index, []))
    text += f"; intact model: {numbers(intact)}"
    if not ratio:  # the intact model is exact: no ratio
        return text
    times = held_out["entropy_mae_bits"] / intact["entropy_mae_bits"]
    return text + f"; MAE ablated / intact {with_interval(times, ratio, 3, 'x')} (paired over the same sequences)"


def predictive_figure(state, batch, predictive: list[torch.Tensor], tokens: list) -> go.Figure:
    """A continuous task: the model's predictive mean +- one sigma beside the exact Bayes predictive."""
    rows = batch.query_mask[0].nonzero().flatten().tolist()
    labels = [state.names(tokens)[i] for i in rows]
    fig = go.Figure()
    for name, mean, var, color in (("Bayes", batch.posterior_mean[0], batch.posterior_var[0], "#2ca02c"),
                                   ("model", predictive[0], predictive[1], "#1f77b4")):
        mean, sigma = mean[rows].float(), var[rows].float().sqrt()
        fig.add_scatter(x=labels, y=mean.tolist(), name=f"{name} mean ± σ", mode="lines+markers",
                        line_color=color, error_y=dict(type="data", array=sigma.tolist(), visible=True),
                        hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}} ± %{{error_y.array:.3f}}<extra></extra>")
    fig.update_layout(title="predictive at each query<br><sup>the model's against the exact Bayes predictive</sup>",
                      xaxis_title="query position", yaxis_title="prediction",
                      width=None, height=360, margin=dict(t=60, b=40))
    return fig


def latent_figure(state, batch, probs: torch.Tensor, tokens: list) -> go.Figure:
    """The task's latent truth for this sequence (its tables, and its true class at each query beside the
    Bayes-MAP class and the model's arg-max), as the task declares them."""
    tables = state.task.latent_tables(batch, 0)
    path = state.task.latent_path(batch, 0)
    titles = list(tables) + ([path[0] + "<br>vs Bayes MAP"] if path else [])  # two lines: no overlap
    if not titles:
        typed = bool((batch.targets[batch.query_mask] == -100).all())  # typed: its true answers are unknown
        return message_figure("a typed sequence keeps no latent truth: sample one by seed to see it" if typed
                               else f"task {state.task.name!r} declares no latent table or path to draw")
    # the tables side by side, the path below them across the width: each gets room, and the tables' colour
    # bar stands beside them, on no plot
    cols, below = max(len(tables), 1), bool(tables and path)
    specs = [[{}] * cols] + ([[{"colspan": cols}] + [None] * (cols - 1)] if below else [])
    fig = make_subplots(rows=1 + below, cols=cols, specs=specs, subplot_titles=titles, horizontal_spacing=0.16,
                        vertical_spacing=0.22, row_heights=[0.42, 0.58] if below else None)
    for col, (title, (matrix, row_names, col_names)) in enumerate(tables.items(), start=1):
        fig.add_heatmap(z=matrix.float().tolist(), x=col_names, y=row_names, coloraxis="coloraxis", row=1,
                        col=col, hovertemplate=f"{title}<br>%{{y}} → %{{x}}: %{{z:.2f}}<extra></extra>")
        fig.update_yaxes(autorange="reversed", title_text="from" if col == 1 else None, row=1, col=col)
    at = dict(row=1 + below, col=1)  # the path's plot
    if path:
        rows = batch.query_mask[0].nonzero().flatten().tolist()
        labels = [state.names(tokens)[i] for i in rows]
        belief = batch.hypothesis.get("belief")
        if belief is None:  # the latent classes are the answer classes (the HMM's states)
            classes = state.class_names()
            lines = (("true", path[1], "#000000", "circle"),
                     ("Bayes MAP", batch.posterior[0, rows].argmax(-1).tolist(), "#2ca02c", "x"),
                     ("model arg-max", probs[rows].argmax(-1).tolist(), "#1f77b4", "diamond-open"))
        else:  # a belief over hidden states beside answers of another kind (a process's next token): the
            # model states no hidden state, so only the truth and the belief's MAP can be drawn
            classes = getattr(state.task, "state_names", lambda: [f"s{i}" for i in range(belief.shape[-1])])()
            lines = (("true", path[1], "#000000", "circle"),
                     ("Bayes MAP", belief[0, rows].argmax(-1).tolist(), "#2ca02c", "x"))
        for name, values, color, symbol in lines:
            fig.add_scatter(x=labels, y=[classes[v] for v in values], mode="markers", name=name,
                            marker=dict(color=color, symbol=symbol, size=9), **at)
        fig.update_yaxes(categoryorder="array", categoryarray=classes, title_text="class", **at)
        fig.update_xaxes(title_text="query position", tickangle=-45, tickfont=dict(size=10), **at)
    # the tables' colour bar beside the last table, over the tables' row only: the tables leave it room
    for i in range(1, len(tables) + 1):
        axis = fig.layout[f"xaxis{i if i > 1 else ''}"]
        axis.domain = [d * TABLES_WIDTH for d in axis.domain]
    last = fig.layout[f"xaxis{len(tables) if len(tables) > 1 else ''}"] if tables else None
    low, high = fig.layout.yaxis.domain if tables else (0, 1)
    fig.update_layout(title="latent truth of this sequence", width=None, height=latent_height(bool(tables), path),
                      coloraxis=dict(colorscale="Blues", cmin=0, colorbar=dict(
                          title="p", x=(last.domain[1] if last else 1.0) + 0.01, xanchor="left", thickness=12,
                          y=(low + high) / 2, yanchor="middle", len=high - low)),
                      legend=dict(orientation="v", x=1.01, xanchor="left", yanchor="top", y=fig.layout[
                          f"yaxis{len(tables) + 1 if tables else ''}"].domain[1] if path else 1),
                      margin=dict(t=70, b=90))
    return fig


def posterior_figure(state, batch, probs: torch.Tensor, tokens: list, choices: list[str] = ()) -> go.Figure:
    """Bayes posterior and model distribution over the answer classes, one row per query position; the model's
    panel names its ablations ("model, L0H2 ablated")."""
    rows = batch.query_mask[0].nonzero().flatten().tolist()
    labels = [state.names(tokens)[i] for i in rows]
    classes = state.class_names()
    bayes, model = batch.posterior[0, rows].float(), probs[rows].float()
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("exact Bayes posterior", ", ".join(["model", ablation_text(choices)][:1 + bool(choices)])))
    for col, (z, what) in enumerate(((bayes, "Bayes"), (model, "model")), start=1):
        fig.add_heatmap(z=z.tolist(), x=classes, y=labels, coloraxis="coloraxis", row=1, col=col,
                        hovertemplate=f"position %{{y}}<br>answer %{{x}}<br>{what} p = %{{z:.4f}}<extra></extra>")
    fig.update_layout(title="answer distribution at each query position", coloraxis=dict(colorscale="Blues",
                      cmin=0, colorbar=dict(title="p")), yaxis=dict(autorange="reversed", title="query position"),
                      height=160 + 18 * len(rows), margin=dict(t=70, b=40))
    fig.update_annotations(font_size=12)  # the two panels' titles side by side in half a page, apart
    return fig


def panels(state, at) -> html.Div:
    """The posterior panel (this sequence's answers and entropies) beside held-out calibration, which holds the
    parts other views put in its places "held-out" (head-ablation's map) and "this sequence" (the logit lens),
    above this sequence's latent truth."""
    task = state.task
    sample = held_out_batch(task, 1, 0)
    n_queries = int(sample.query_mask.sum())
    latent = latent_height(bool(task.latent_tables(sample, 0)), task.latent_path(sample, 0))
    return html.Div([
        panel("posterior", graph("posterior", 240 if task.continuous else  # a continuous task: one sentence
                                 min(max(160 + 18 * n_queries, 300), 800)), graph("entropy", 320),
              graph("gap", 320), minWidth="0"),
        panel("held-out calibration", graph("calibration", 320), *at("held-out"),
              html.H3("this sequence", style=dict(margin="4px 0")), *at("this sequence"), graph("latent", latent),
              minWidth="0"),
    ], style=dict(display="grid", gridTemplateColumns="1fr 1fr", alignItems="start"))


def register(app, state) -> None:
    """The posterior panels' callback: every figure of them, the calibration summary and the step's label."""

    @app.callback(Output("posterior", "figure"), Output("entropy", "figure"), Output("gap", "figure"),
                  Output("calibration", "figure"), Output("latent", "figure"),
                  Output("calibration-summary", "children"),
                  Output("step-label", "children"),
                  Input("step", "value"), Input("sequence", "data"), *CONTROLS)
    def posterior(index, sequence, heads, blocks, mode):
        try:
            v = posterior_views(state, index, sequence["tokens"], sequence["seed"], chosen_ablations(heads, blocks, mode))
        except REFUSED as err:  # e.g. the slider onto a corrupt earlier checkpoint: said in the views
            return *[message_figure(str(err))] * 5, str(err), no_update
        return (v["posterior"], v["entropy"], v["gap"], v["calibration"], v["latent"], v["summary"],
                f"step {state.steps[index]}")


VIEW = View("posterior", {"main": panels}, register)
