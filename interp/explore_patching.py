"""The explorers' causal-intervention panel: activation patching on the input being looked at.

Where the pair comes from is a *source*: ``WindTunnelPairs`` (interp/explore.py) takes the sequence shown as
the clean input and the task's corruption (chosen in the panel) makes the corrupted one; ``LanguagePairs``
(interp/explore_lm.py) draws prompts of a prompt task (two-label, coin) with the explorer's seed and flips
one shown observation. Both inputs are drawn side by side with the changed token marked. The heat map is
activation patching on that pair (``analyses.activation_patching``, the same sites, positions and Bayes
scale); clicking a cell draws that intervention's answer at the query next to the Bayes answers of the
clean and the corrupted input and the model's own answers on them. ``panel`` is the layout, ``register``
the callbacks and ``rules`` their request rules: an explorer adds the three and nothing else.
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output, State, dcc, html, no_update

from analyses import interventions as P
from analyses import style
from analyses.activation_patching import measure
from analyses.base import AnalysisError
from tasks import ConfigError

from .errors import UserError

CORRUPTION_SEED = 0  # which corrupted value or symbol is drawn: fixed, so a view is reproducible
LANGUAGE_PROMPTS = 8  # prompts per number of shown examples drawn for a language model's pair
LANGUAGE_ALPHA = 0.9  # two-label: the chance a shown label is the latent one (the analysis's default)


class WindTunnelPairs:
    """The wind-tunnel explorer's pairs: the sequence shown (at the step slider's checkpoint), corrupted by the
    task's corruption ``kind`` at ``which``."""

    which = "which (pair, observation, slot or output; empty: the task's default)"

    def __init__(self, explorer):
        self.explorer, self.lock, self.waits = explorer, explorer.lock, explorer.waits
        self.kinds, self.subject = list(explorer.task.corruptions), explorer.task.name
        self.states = (State("step", "value"), State("sequence", "data"))

    def pair(self, kind: str, which: int | None, index: int, sequence: dict) -> P.Pair:
        ex = self.explorer
        batch = ex.batch(sequence["tokens"], sequence.get("seed"))
        try:
            c = ex.task.corrupt(batch, torch.Generator().manual_seed(CORRUPTION_SEED), kind or "", which)
        except ConfigError as err:
            raise UserError(str(err)) from None
        return P.pair_of(ex.model(index), c)

    def names(self, tokens: torch.Tensor) -> list[str]:
        return self.explorer.task.position_names(tokens.cpu())


class LanguagePairs:
    """The language-model explorer's pairs: prompts of prompt task ``kind`` drawn with the explorer's seed
    (``LANGUAGE_PROMPTS`` per number of shown examples, those with the most patched together), shown
    observation ``which`` flipped (``analyses.interventions.language_pair``, as ``interp run activation-patching
    --model``)."""

    which = "which shown observation to flip (empty: the first)"

    def __init__(self, explorer):
        from tasks import prompts as prompt_tasks

        self.lm, self.lock, self.waits = explorer.lm, explorer.lock, explorer.waits
        self.kinds = [n for n in prompt_tasks.NAMES if prompt_tasks.make(n).predictive([0], LANGUAGE_ALPHA) is not None]
        self.subject = explorer.lm.name
        self.states = (State("seed", "value"),)

    def pair(self, kind: str, which: int | None, seed) -> P.Pair:
        from tasks.base import SEED_RANGE, is_seed

        seed = 0 if seed is None else seed
        if not is_seed(seed):
            raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
        return P.language_pair(self.lm, kind, "mixed", LANGUAGE_PROMPTS, LANGUAGE_ALPHA, seed, which or 0)

    def names(self, tokens: torch.Tensor) -> list[str]:
        return [self.lm.tokenizer.decode([t]) for t in tokens.tolist()]


class PatchingView:
    """One pair's patching results, kept for the last (kind, which, source state) asked about."""

    def __init__(self, source):
        self.source = source
        self._key, self._value = None, None

    def computed(self, kind: str, which: int | None, *state):
        key = (kind, which, repr(state))
        if key != self._key:
            src = self.source
            with src.lock:
                pair = src.pair(kind, which, *state)
                with src.waits.on(f"activation patching on {len(pair.clean)} input pair(s)"):
                    scorer = P.Scorer(pair)
                    chosen, where = P.sites(pair.model), pair.positions("auto")
                    answers = {}
                    grid, _ = measure(pair, scorer, chosen, where, answers)
            self._key, self._value = key, (pair, scorer, chosen, where, grid, answers)
        return self._value


def panel(source) -> html.Div:
    kinds = source.kinds
    return html.Div([
        html.H3("causal interventions: activation patching", style=dict(margin="4px 0")),
        html.Div("no corruption is declared for this task" if not kinds else [
            html.Label("corruption "),
            dcc.Dropdown(id="patch-kind", options=[{"label": k, "value": k} for k in kinds], value=kinds[0],
                         clearable=False, style=dict(width="160px", display="inline-block", verticalAlign="middle")),
            html.Label(f" {source.which} ", style=dict(marginLeft="10px")),
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


def pair_text(pair: P.Pair, source) -> list:
    """The clean and the corrupted sequence, one line each, the changed tokens marked."""
    lines = []
    for label, tokens in (("clean    ", pair.clean[0]), ("corrupted", pair.corrupted[0])):
        names = source.names(tokens.cpu())
        spans = [html.B(n, style=dict(color="#b00")) if i in pair.changed else
                 html.U(n) if i == pair.query else html.Span(n) for i, n in enumerate(names)]
        lines.append(html.Div([html.Span(label + "  ")] + [x for s in spans for x in (s, html.Span(" "))]))
    return lines + [html.Div(f"{pair.what}; the answer is read at position {pair.query} (underlined)",
                             style=dict(fontFamily="sans-serif", color="#555"))]


def cell_figure(pair: P.Pair, scorer: P.Scorer, subject: str, site: str, position, answer: torch.Tensor) -> go.Figure:
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
    fig.update_layout(title=f"{subject}: {site} at {position} patched<br><sup>Bayes scale {P.short(score['bayes'])}, "
                            f"model scale {P.short(score['model'])}</sup>")
    return style.apply(fig, subject=subject)


def rules(source) -> dict:
    """The request rules of this panel's controls (interp/requests.py checks every request with them)."""
    from .requests import MAX_CLICKS, Refused, integer, one_of

    def click(value):
        points = value.get("points") if isinstance(value, dict) else None
        if value is not None and not (isinstance(points, list) and len(points) == 1 and isinstance(points[0], dict)
                                      and all(isinstance(points[0].get(k), str) and len(points[0][k]) < 200
                                              for k in ("x", "y"))):
            raise Refused("a click on the patching map is one point with a site and a position")
    return {("patch-run", "n_clicks"): integer(0, MAX_CLICKS, optional=True),
            ("patch-kind", "value"): one_of(*source.kinds) if source.kinds else one_of(None),
            ("patch-index", "value"): integer(0, 10 ** 6, optional=True),
            ("patch-map", "clickData"): click}


def register(app, source) -> None:
    view = PatchingView(source)
    if not source.kinds:
        return

    @app.callback(Output("patch-map", "figure"), Output("patch-pair", "children"), Output("patch-message", "children"),
                  Input("patch-run", "n_clicks"), *source.states,
                  State("patch-kind", "value"), State("patch-index", "value"), prevent_initial_call=True)
    def patch_map(_clicks, *values):
        *state, kind, which = values
        try:
            pair, scorer, chosen, where, grid, _ = view.computed(kind, which, *state)
        except (UserError, AnalysisError, ConfigError) as err:
            return no_update, no_update, str(err)
        cols = [pair.labels[p] for p in where] + ["all positions"]
        hover = [[f"model scale {P.short(m)}" for m in row] for row in grid["model"]]
        fig = P.grid_figure(grid["bayes"], [s.label for s in chosen], cols,
                            f"activation patching on this sequence<br><sup>Bayes scale at position {pair.query}; "
                            f"click a cell for its answer</sup>", "Bayes scale", hover)
        fig.update_layout(width=None, height=None)
        return style.apply(fig, subject=source.subject), pair_text(pair, source), ""

    @app.callback(Output("patch-cell", "figure"), Input("patch-map", "clickData"), *source.states,
                  State("patch-kind", "value"), State("patch-index", "value"), prevent_initial_call=True)
    def patch_cell(click, *values):
        *state, kind, which = values
        if not click:
            return no_update
        try:
            pair, scorer, chosen, where, _, answers = view.computed(kind, which, *state)
        except (UserError, AnalysisError, ConfigError):
            return no_update
        point = click["points"][0]
        labels = [pair.labels[p] for p in where]
        position = where[labels.index(point["x"])] if point["x"] in labels else None
        answer = answers.get((point["y"], position))
        if answer is None:
            return no_update
        return cell_figure(pair, scorer, source.subject, point["y"], "every position" if position is None else
                           pair.labels[position], answer)
