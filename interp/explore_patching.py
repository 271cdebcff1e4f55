"""The explorer's causal-intervention panel: activation patching on the sequence being looked at.

The sequence shown is the clean input; the task's corruption (chosen in the panel) makes the corrupted
one, and both are drawn side by side with the changed token marked. The heat map is activation patching
on that one pair (``analyses.activation_patching``, the same sites, positions and Bayes scale); clicking a
cell draws that intervention's answer at the query next to the Bayes answers of the clean and the
corrupted input and the model's own answers on them. ``panel`` is the layout, ``register`` the callbacks:
interp/explore.py adds both and nothing else.
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output, State, dcc, html, no_update

from analyses import _patching as P
from analyses import style
from analyses.activation_patching import measure
from analyses.base import AnalysisError
from tasks import ConfigError

from .errors import UserError

CORRUPTION_SEED = 0  # which corrupted value or symbol is drawn: fixed, so a view is reproducible


class PatchingView:
    """One pair's patching results, kept for the last (checkpoint, sequence, corruption) asked about."""

    def __init__(self, explorer):
        self.explorer = explorer
        self._key, self._value = None, None

    def computed(self, index: int, sequence: dict, kind: str, which: int | None):
        key = (index, tuple(map(str, sequence["tokens"])), sequence.get("seed"), kind, which)
        if key != self._key:
            ex = self.explorer
            with ex.lock:
                model = ex.model(index)
                batch = ex.batch(sequence["tokens"], sequence.get("seed"))
                try:
                    c = ex.task.corrupt(batch, torch.Generator().manual_seed(CORRUPTION_SEED), kind or "", which)
                except ConfigError as err:
                    raise UserError(str(err)) from None
                pair = P.pair_of(model, c)
                scorer = P.Scorer(pair)
                chosen, where = P.sites(model), pair.positions("auto")
                answers = {}
                grid, _ = measure(pair, scorer, chosen, where, answers)
            self._key, self._value = key, (pair, scorer, chosen, where, grid, answers)
        return self._value


def panel(explorer) -> html.Div:
    kinds = list(explorer.task.corruptions)
    return html.Div([
        html.H3("causal interventions: activation patching", style=dict(margin="4px 0")),
        html.Div("no corruption is declared for this task" if not kinds else [
            html.Label("corruption "),
            dcc.Dropdown(id="patch-kind", options=[{"label": k, "value": k} for k in kinds], value=kinds[0],
                         clearable=False, style=dict(width="160px", display="inline-block", verticalAlign="middle")),
            html.Label(" which (pair, observation, slot or output; empty: the task's default) ",
                       style=dict(marginLeft="10px")),
            dcc.Input(id="patch-index", type="number", min=0, step=1, value=None, style=dict(width="70px")),
            html.Button("patch", id="patch-run", n_clicks=0, style=dict(marginLeft="8px")),
            html.Span(id="patch-message", style=dict(color="#b00", marginLeft="12px")),
        ]),
        html.Div(id="patch-pair", style=dict(fontFamily="monospace", fontSize="12px", margin="6px 0",
                                             overflowX="auto", whiteSpace="nowrap")),
        html.Div([
            dcc.Loading(dcc.Graph(id="patch-map", config=dict(displaylogo=False), responsive=True,
                                  style=dict(height="520px")), type="dot", delay_show=400),
            dcc.Graph(id="patch-cell", config=dict(displaylogo=False), responsive=True, style=dict(height="520px")),
        ], style=dict(display="grid", gridTemplateColumns="3fr 2fr", alignItems="start")),
    ], style=dict(border="1px solid #ddd", borderRadius="6px", padding="8px", margin="6px",
                  display="block" if kinds else "none"))


def pair_text(pair: P.Pair, task) -> list:
    """The clean and the corrupted sequence, one line each, the changed tokens marked."""
    lines = []
    for label, tokens in (("clean    ", pair.clean[0]), ("corrupted", pair.corrupted[0])):
        names = task.token_names(tokens.cpu())
        spans = [html.B(n, style=dict(color="#b00")) if i in pair.changed else
                 html.U(n) if i == pair.query else html.Span(n) for i, n in enumerate(names)]
        lines.append(html.Div([html.Span(label + "  ")] + [x for s in spans for x in (s, html.Span(" "))]))
    return lines + [html.Div(f"{pair.what}; the answer is read at position {pair.query} (underlined)",
                             style=dict(fontFamily="sans-serif", color="#555"))]


def cell_figure(pair: P.Pair, scorer: P.Scorer, task, site: str, position, answer: torch.Tensor) -> go.Figure:
    """That intervention's answer next to the Bayes answers of both inputs and the model's own."""
    rows = [("Bayes, clean input", pair.bayes_clean[0]), ("Bayes, corrupted input", pair.bayes_corrupted[0]),
            ("model, clean input", scorer.clean[0]), ("model, corrupted input", scorer.corrupted[0]),
            (f"model, corrupted with {site} at {position} patched", answer[0])]
    fig = go.Figure()
    if pair.kind == "mean":
        fig.add_bar(x=[r[0] for r in rows], y=[float(r[1][0]) for r in rows])
        fig.update_layout(yaxis_title="predictive mean")
    else:
        relevant = (pair.bayes_clean[0] + pair.bayes_corrupted[0] + scorer.clean[0] + scorer.corrupted[0] +
                    answer[0]).topk(min(8, pair.bayes_clean.shape[1])).indices.sort().values
        names = [f"class {int(c)}" for c in relevant]
        for name, vector in rows:
            fig.add_bar(x=names, y=vector[relevant].tolist(), name=name)
        fig.update_layout(barmode="group", yaxis_title="probability", legend=dict(orientation="h", y=-0.25))
    score = scorer.both(answer)
    fig.update_layout(title=f"{task.name}: {site} at {position} patched<br><sup>Bayes scale {P.short(score['bayes'])}, "
                            f"model scale {P.short(score['model'])}</sup>")
    return style.apply(fig, subject=task.name)


def rules(explorer) -> dict:
    """The request rules of this panel's controls (interp/requests.py checks every request with them)."""
    from .requests import MAX_CLICKS, Refused, integer, one_of

    def click(value):
        points = value.get("points") if isinstance(value, dict) else None
        if value is not None and not (isinstance(points, list) and len(points) == 1 and isinstance(points[0], dict)
                                      and all(isinstance(points[0].get(k), str) and len(points[0][k]) < 200
                                              for k in ("x", "y"))):
            raise Refused("a click on the patching map is one point with a site and a position")
    return {("patch-run", "n_clicks"): integer(0, MAX_CLICKS, optional=True),
            ("patch-kind", "value"): one_of(*explorer.task.corruptions) if explorer.task.corruptions else one_of(None),
            ("patch-index", "value"): integer(0, 10 ** 6, optional=True),
            ("patch-map", "clickData"): click}


def register(app, explorer) -> None:
    view = PatchingView(explorer)
    if not explorer.task.corruptions:
        return

    @app.callback(Output("patch-map", "figure"), Output("patch-pair", "children"), Output("patch-message", "children"),
                  Input("patch-run", "n_clicks"), State("step", "value"), State("sequence", "data"),
                  State("patch-kind", "value"), State("patch-index", "value"), prevent_initial_call=True)
    def patch_map(_clicks, index, sequence, kind, which):
        try:
            pair, scorer, chosen, where, grid, _ = view.computed(index, sequence, kind, which)
        except (UserError, AnalysisError, ConfigError) as err:
            return no_update, no_update, str(err)
        cols = [pair.labels[p] for p in where] + ["all positions"]
        hover = [[f"model scale {P.short(m)}" for m in row] for row in grid["model"]]
        fig = P.grid_figure(grid["bayes"], [s.label for s in chosen], cols,
                            f"activation patching on this sequence<br><sup>Bayes scale at position {pair.query}; "
                            f"click a cell for its answer</sup>", "Bayes scale", hover)
        fig.update_layout(width=None, height=None)
        return style.apply(fig, subject=explorer.task.name), pair_text(pair, explorer.task), ""

    @app.callback(Output("patch-cell", "figure"), Input("patch-map", "clickData"), State("step", "value"),
                  State("sequence", "data"), State("patch-kind", "value"), State("patch-index", "value"),
                  prevent_initial_call=True)
    def patch_cell(click, index, sequence, kind, which):
        if not click:
            return no_update
        try:
            pair, scorer, chosen, where, _, answers = view.computed(index, sequence, kind, which)
        except (UserError, AnalysisError, ConfigError):
            return no_update
        point = click["points"][0]
        labels = [pair.labels[p] for p in where]
        position = where[labels.index(point["x"])] if point["x"] in labels else None
        answer = answers.get((point["y"], position))
        if answer is None:
            return no_update
        return cell_figure(pair, scorer, explorer.task, point["y"], "every position" if position is None else
                           pair.labels[position], answer)
