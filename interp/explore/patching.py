"""The explorers' causal-intervention view: activation patching on the input being looked at.

Where the pair comes from is a *source* (``pairs``): on a wind tunnel the sequence shown, corrupted by the task's
corruption chosen in the panel; on a language model drawn prompts of a prompt task, one shown observation flipped.
Both inputs are drawn side by side with the changed token marked. The heat map is activation patching on that pair
(``analyses.activation_patching``, the same sites, positions and Bayes scale); clicking a cell draws that
intervention's answer at the query next to the Bayes answers of the clean and the corrupted input and the model's
own answers on them. ``view(source)`` is the view of an explorer whose pairs come from ``source``.

The map is computed as a job (``jobs``): the status line's tick shows its progress (steps done, seconds so far,
about how many left) with a cancel, in every tab; a language model's press answers at once and its views run on the
model between two steps, a wind tunnel's press waits for its map (seconds). When the job ends, the tab whose
controls asked for that pair draws its map (``patch-shown``).

A wind tunnel's map is every cell measured, one site a step. A language model's would be hours on a CPU, so its
map is estimated first and its strongest cells measured (``lm_patching``): the map rings the exact cells and says
the rest are estimates, a click measures any other; a layer's heads are drawn when that layer is picked
(``patch-heads``), from the same estimate.
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output, State, dcc, html, no_update

from analyses import interventions as P
from analyses import style
from analyses.activation_patching import measure

from ..errors import UserError
from ..requests import Refused, integer, one_of
from .common import CLICKS, CONFIG, REFUSED, message_figure
from . import lm_patching
from .jobs import Job, Jobs
from .lm_patching import Patched, covers, estimated_map, map_height, mark, put, shown_sites, whole
from .page import View


class SiteAnswers(dict):
    """``measure``'s ``answers``, filled one site at a time: each site is a step of the job (its progress, where a
    cancel takes effect and where waiting views run)."""

    def __init__(self, job):
        super().__init__()
        self.job = job

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self.job.step()


FIRST_WAIT_S = 1.0  # how long a background job's press waits before answering with its progress instead
QUIET_S = 1.0  # how long after a job ends (or a press drew it) the tick draws its map in the tabs that asked


class PatchingView:
    """Patching results per (kind, which, followed controls, source state), computed as background jobs
    (``jobs``): progress, time left and cancel in the panel."""

    def __init__(self, source):
        self.source = source
        self.jobs = Jobs(source.lock)

    @staticmethod
    def key(kind: str, which: int | None, follows: tuple, state: tuple):
        return (kind, which, repr(follows), repr(state))

    def start(self, kind: str, which: int | None, follows: tuple, *state) -> Job:
        src = self.source

        def work(job):
            with src.applied(*state, *follows) as model:  # the model as the other views see it
                pair = src.pair(kind, which, *state, model=model)
                job.what = f"activation patching on {len(pair.clean)} input pair(s)"
                scorer = P.Scorer(pair)
                chosen, where = P.sites(pair.model), pair.positions("auto")
                if src.estimate_first:  # a language model: every cell estimated, the strongest measured
                    return estimated_map(pair, scorer, chosen, where, job)
                job.total = len(chosen)
                answers = SiteAnswers(job)
                grid, _ = measure(pair, scorer, chosen, where, answers)
            return Patched(pair, scorer, chosen, where, grid, dict(answers))
        unit = "cells measured exactly" if src.estimate_first else "sites"
        return self.jobs.start(self.key(kind, which, follows, state), "activation patching", work, unit=unit,
                               take_turns=src.background)

    def computed(self, kind: str, which: int | None, follows: tuple, *state, wait: float | None = None):
        """The results of that pair (waiting for its job, at most ``wait`` seconds), or None while it runs; a
        refusal (UserError) if the job failed or was cancelled."""
        job = self.start(kind, which, follows, *state)
        job.wait(wait)
        if job.state == "running":
            return None
        if job.state != "done":
            raise UserError(job.error or job.line())
        return job.result


def panel(source) -> html.Div:
    kinds = source.kinds
    layers = P.n_layers(source.model) if source.estimate_first else 0
    heads = [html.Label(" heads of layer ", style=dict(marginLeft="10px")),
             dcc.Dropdown(id="patch-heads", options=[{"label": f"L{l}", "value": l} for l in range(layers)],
                          value=None, placeholder="none", style=dict(width="90px", display="inline-block",
                                                                     verticalAlign="middle"))] if layers else []
    return html.Div([
        html.H3("causal interventions: activation patching", style=dict(margin="4px 0")),
        html.Div("no corruption is declared for this task" if not kinds else [
            html.Label("corruption "),
            dcc.Dropdown(id="patch-kind", options=[{"label": k, "value": k} for k in kinds], value=kinds[0],
                         clearable=False, style=dict(width="160px", display="inline-block", verticalAlign="middle")),
            html.Label(f" {source.which} ", style=dict(marginLeft="10px")),
            dcc.Input(id="patch-index", type="number", min=0, step=1, value=None, style=dict(width="70px")),
            html.Button("patch", id="patch-run", n_clicks=0, style=dict(marginLeft="8px")),
            *heads,
            html.Button("cancel", id="patch-cancel", n_clicks=0, style=HIDDEN),
            html.Span(id="patch-message", style=dict(color="#b00", marginLeft="12px")),
        ]),
        *([html.Div(covers(source), id="patch-covers", style=dict(fontSize="13px", color="#555", margin="4px 0"))]
          if source.estimate_first and kinds else []),
        html.Div(id="patch-progress", style=dict(fontSize="13px", color="#555", margin="4px 0")),
        dcc.Store(id="patch-shown", data=None),
        dcc.Store(id="patch-drawn", data=None),  # the job whose map this tab shows: not drawn twice
        html.Div(id="patch-pair", style=dict(fontFamily="monospace", fontSize="12px", margin="6px 0",
                                             overflowX="auto", whiteSpace="nowrap")),
        html.Div([
            dcc.Loading(dcc.Graph(id="patch-map", config=CONFIG, responsive=True,
                                  figure=message_figure("press patch: each site and position of the corrupted input "
                                                        "patched from the clean one"),
                                  style=dict(height=map_height(source))), type="dot", delay_show=400),
            dcc.Graph(id="patch-cell", config=CONFIG, responsive=True, style=dict(height="460px"),
                      figure=message_figure("then click a cell of the map for that patch's answer")),
        ]),  # one above the other, each the panel's width: a map's 39 position labels and the bars have room
    ], style=dict(border="1px solid #ddd", borderRadius="6px", padding="8px", margin="6px",
                  display="block" if kinds else "none"))


def pair_text(pair: P.Pair, source) -> list:
    """The clean and the corrupted sequence, one line each, the changed tokens marked: a run of unmarked tokens is
    one piece of text (recall's 329 tokens a line are a few elements, not a thousand the page takes seconds over)."""
    lines = []
    for label, tokens in (("clean    ", pair.clean[0]), ("corrupted", pair.corrupted[0])):
        pieces, plain = [html.Span(label + "  ")], []
        for i, name in enumerate(source.names(tokens.cpu())):
            if i in pair.changed or i == pair.query:
                pieces += [html.Span(" ".join(plain) + " ")] if plain else []
                plain = []
                pieces += [html.B(name, style=dict(color="#b00")) if i in pair.changed else html.U(name), " "]
            else:
                plain.append(name)
        lines.append(html.Div(pieces + ([html.Span(" ".join(plain))] if plain else [])))
    return lines + [html.Div(f"{pair.what}; the answer is read at position {pair.query} (underlined)",
                             style=dict(fontFamily="sans-serif", color="#555"))]


def cell_figure(pair: P.Pair, scorer: P.Scorer, subject: str, site: str, position, answer: torch.Tensor,
                source_names=lambda classes: [f"class {c}" for c in classes],
                estimate: float | None = None) -> go.Figure:
    """That intervention's answer next to the Bayes answers of both inputs and the model's own; ``estimate``: the
    map's first-order estimate of it (model scale), the cell measured just now."""
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
        names = source_names(relevant.tolist())
        for name, vector in rows:
            fig.add_bar(x=names, y=vector[relevant].tolist(), name=name)
        # the legend to the right of the plot, one answer a line: it covers no bar and no tick
        fig.update_layout(barmode="group", bargroupgap=0.05, yaxis_title="probability",
                          legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))
    score = scorer.both(answer)
    now = "" if estimate is None else f"; measured now (the map's first-order estimate: {number(estimate)})"
    fig.update_layout(title=f"{subject}: {site} at {position} patched<br><sup>Bayes scale {number(score['bayes'])}, "
                            f"model scale {number(score['model'])}{now}</sup>")
    return style.apply(fig, subject=subject)


def number(x: float | None) -> str:
    """A score as the titles write it (``interventions.short``), never "-0.000"."""
    text = P.short(x)
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def rules(source) -> dict:
    """The request rules of this panel's controls (interp/requests.py checks every request with them)."""
    def click(value):
        points = value.get("points") if isinstance(value, dict) else None
        if value is not None and not (isinstance(points, list) and len(points) == 1 and isinstance(points[0], dict)
                                      and all(isinstance(points[0].get(k), str) and len(points[0][k]) < 200
                                              for k in ("x", "y"))):
            raise Refused("a click on the patching map is one point with a site and a position")
    return {("patch-run", "n_clicks"): CLICKS,
            ("patch-kind", "value"): one_of(*source.kinds) if source.kinds else one_of(None),
            ("patch-index", "value"): integer(0, 10 ** 6, optional=True),
            ("patch-map", "clickData"): click, ("patch-cancel", "n_clicks"): CLICKS,
            ("patch-shown", "data"): integer(0, 10 ** 9, optional=True),
            ("patch-drawn", "data"): integer(0, 10 ** 9, optional=True)} | (
        {("patch-heads", "value"): integer(0, P.n_layers(source.model) - 1, optional=True)}
        if source.estimate_first and source.kinds else {})


HIDDEN = dict(display="none")
RUNNING = ("activation patching runs in the background (its progress above, with a cancel):<br>the map appears "
           "here when it is done, and the other views answer meanwhile")
CANCEL = dict(marginLeft="8px")


def register(app, source) -> None:
    results = PatchingView(source)
    app.patching_jobs = results.jobs  # what runs in the background, for a test to look at
    if not source.kinds:
        return

    follows = source.follows
    followed = [State(f.component_id, f.component_property) for f in follows]  # the cell reads the map's cache
    n_follows = len(follows)

    # a language model's map draws the heads of the layer picked (read last; not part of what is computed)
    heads = [State("patch-heads", "value")] if source.estimate_first else []

    def split(values):
        values, layer = (values[:-1], values[-1]) if heads else (values, None)
        chosen_follows, (*state, kind, which) = values[:n_follows], values[n_follows:]
        return tuple(chosen_follows), tuple(state), kind, which, layer

    def drawn(result: Patched, job: Job, layer: int | None = None):
        fig = map_figure(*result[:5], source.subject, result.measured, layer).update_layout(meta=dict(job=job.id))
        return fig, pair_text(result.pair, source), warning(result.scorer)

    @app.callback(Output("patch-map", "figure"), Output("patch-pair", "children"), Output("patch-message", "children"),
                  Input("patch-run", "n_clicks"), *follows, *source.states,
                  State("patch-kind", "value"), State("patch-index", "value"), *heads, prevent_initial_call=True)
    def patch_map(clicks, *values):
        """The press: the map at once if it is done within ``FIRST_WAIT_S`` (a small model's: the press waits for
        it), else a line saying it runs; the progress line and the tick below deliver it when done. The map drawn
        here is not drawn again when the tick says its job ended (``patch-drawn``)."""
        if not clicks:  # an ablation ticked before any map was asked for: nothing to redraw
            return no_update, no_update, no_update
        chosen_follows, state, kind, which, layer = split(values)
        try:
            job = results.start(kind, which, chosen_follows, *state)
            with job.delivery():  # the tick leaves the drawing to this press
                result = results.computed(kind, which, chosen_follows, *state,
                                       wait=FIRST_WAIT_S if source.background else None)
                return (message_figure(RUNNING, size=13), no_update, "") if result is None else \
                    drawn(result, job, layer)
        except REFUSED as err:
            return no_update, no_update, str(err)

    @app.callback(Output("patch-progress", "children"), Output("patch-cancel", "style"), Output("patch-shown", "data"),
                  Input("tick", "n_intervals"), State("patch-shown", "data"), prevent_initial_call=True)
    def patch_progress(_ticks, shown):
        """Every tick of the status line: the job's progress while it runs (a second tab sees it too), and, once,
        that it ended (``patch-shown``, which draws its map in this tab if it is this tab's pair). Nothing else is
        written per tick: the map's spinner shows only while a map is on its way."""
        job = results.jobs.latest()
        if job is None or job.state != "running" and shown == job.id:
            return no_update, no_update, no_update
        if job.state == "running":
            return job.line(), CANCEL, no_update
        # ended: said at once, its map left a moment to a press drawing it (then not drawn twice, see patch-drawn)
        return job.line(), HIDDEN, job.id if job.quiet(QUIET_S) else no_update

    @app.callback(Output("patch-map", "figure", allow_duplicate=True),
                  Output("patch-pair", "children", allow_duplicate=True),
                  Output("patch-message", "children", allow_duplicate=True),
                  Input("patch-shown", "data"), State("patch-drawn", "data"), *followed, *source.states,
                  State("patch-kind", "value"), State("patch-index", "value"), *heads, prevent_initial_call=True)
    def patch_ended(shown, shown_here, *values):
        """A job ended: its map, if it is this tab's pair (not another tab's, asked for with other controls) and
        not drawn here already (by the press), or why there is none."""
        job = results.jobs.latest()
        chosen_follows, state, kind, which, layer = split(values)
        if job is None or job.id != shown or job.id == shown_here or \
                job.key != results.key(kind, which, chosen_follows, state):
            return no_update, no_update, no_update
        if job.state == "done":
            return drawn(job.result, job, layer)
        return message_figure(f"{job.line()}; press patch to start it again" if job.state == "cancelled" else
                              "no map: " + (job.error or job.line()), size=13), no_update, job.error or ""

    # the job whose map this tab shows, read in the page from the map itself (no request): the tick's "it ended"
    # does not draw again what the press drew (a recall pair's 329 tokens a line are seconds of the page's time)
    app.clientside_callback("function (figure) { return (figure && figure.layout && figure.layout.meta &&"
                            " figure.layout.meta.job) || null; }", Output("patch-drawn", "data"),
                            Input("patch-map", "figure"))

    @app.callback(Output("patch-progress", "children", allow_duplicate=True), Input("patch-cancel", "n_clicks"),
                  prevent_initial_call=True)
    def patch_cancel(clicks):
        job = results.jobs.running()
        if not clicks or job is None:
            return no_update
        job.cancel()
        return job.line()

    if heads:
        @app.callback(Output("patch-map", "figure", allow_duplicate=True), Input("patch-heads", "value"),
                      *followed, *source.states, State("patch-kind", "value"), State("patch-index", "value"),
                      prevent_initial_call=True)
        def patch_heads(layer, *values):
            """Another layer's heads picked: the map of this pair drawn again with them (nothing computed)."""
            chosen_follows, state, kind, which, _ = split((*values, layer))
            job = results.jobs.get(results.key(kind, which, chosen_follows, state))
            if job is None or job.state != "done":
                return no_update
            return drawn(job.result, job, layer)[0]

    @app.callback(Output("patch-cell", "figure"), Input("patch-map", "clickData"), *followed, *source.states,
                  State("patch-kind", "value"), State("patch-index", "value"), *heads, prevent_initial_call=True)
    def patch_cell(click, *values):
        """A clicked cell's answer; on an estimated map a cell not measured yet is measured now (one forward
        pass on the prompts, between two steps of a job that runs), and kept."""
        chosen_follows, state, kind, which, _ = split(values)
        if not click:
            return no_update
        job = results.jobs.get(results.key(kind, which, chosen_follows, state))
        if job is None or job.state != "done":  # the map clicked is not (or no longer) this pair's
            return no_update
        result, point = job.result, click["points"][0]
        pair, where = result.pair, result.where
        labels = [pair.labels[p] for p in where]
        position = where[labels.index(point["x"])] if point["x"] in labels else None
        answer, estimate = result.answers.get((point["y"], position)), None
        sites = {s.label: s for s in result.chosen}
        if answer is None and result.measured is not None and point["y"] in sites:
            site = sites[point["y"]]
            i, j = result.chosen.index(site), [*where, None].index(position)
            estimate = result.grid["model"][i][j]
            if estimate is None:  # no cell there (a recurrent state at every position at once)
                return no_update
            with source.lock:
                answer = lm_patching.measure_cells(pair, [(site, position)], result.clean, result.corrupted)[0]
            put(result.grid, result.answers, result.measured, result.scorer, i, j, site, position, answer)
        if answer is None:
            return no_update
        return cell_figure(pair, result.scorer, source.subject, point["y"], "every position" if position is None else
                           pair.labels[position], answer, source.answer_names, estimate)


SMALL_EFFECT = 0.1  # the model's clean and corrupted answers closer than this on the Bayes scale: little to restore


def warning(scorer: P.Scorer) -> str:
    """A line for the panel when the model barely tells the two inputs apart (the fractions are then noise)."""
    base = scorer.baselines()
    gap = (None if base["clean_on_bayes_scale"] is None or base["corrupted_on_bayes_scale"] is None else
           base["clean_on_bayes_scale"] - base["corrupted_on_bayes_scale"])
    if not base["model_moves"] or gap is None or abs(gap) < SMALL_EFFECT:
        return (f"the model's answers on the clean and the corrupted input barely differ ({P.short(gap)} on the Bayes "
                f"scale): there is little effect to restore, so the fractions in the map are mostly noise")
    return ""


def map_figure(pair: P.Pair, scorer: P.Scorer, chosen, where, grid: dict, subject: str, measured: set | None = None,
               layer: int | None = None) -> go.Figure:
    """The fraction of the model's own effect each patch restores (0: its answer on the corrupted input, 1: on the
    clean one), the Bayes scale in the hover, and where the model's two answers sit on it in the title; where the
    model answers both inputs alike there is no fraction to draw, and the panel says so. An estimated map
    (``measured``: the cells measured exactly) draws ``shown_sites`` (the heads of ``layer``), its measured cells
    marked with a ring and said so in the hover, the others said to be first-order estimates."""
    baselines, many = scorer.baselines(), len(pair.clean) > 1
    rows = chosen if measured is None else shown_sites(chosen, layer)
    if measured is not None:
        grid = {scale: [grid[scale][chosen.index(s)] for s in rows] for scale in grid}
    if all(v is None for row in grid["model"] for v in row):
        return message_figure(
            f"no map to draw: the model's answer at position {pair.query} is the same on the clean and the corrupted "
            f"input,<br>so no patch can restore a fraction of an effect it does not have (every cell would be 0 / 0)",
            size=13)
    if many:  # a language model's prompts: the analysis's intervals over them, said in the title's last line
        baselines["intervals"] = scorer.baseline_intervals()
    clean_run = {(s.label, None) for s in whole(chosen)}
    estimated = "" if measured is None else (
        f"<br><sup>ringed: exact, the {len(measured - clean_run)} cells measured (those of the largest estimated "
        f"effect, and any clicked since) and the residual stream at all positions (the clean run itself); the others "
        f"are first-order estimates (attribution patching): a click measures one</sup>")
    fig = P.patching_map(pair, rows, where, grid, baselines, "model",
                         f"activation patching: effect restored at position {pair.query}<br><sup>0 = the model's "
                         f"corrupted answer, 1 = its clean one" + ("" if many else "; one input pair, computed "
                         "exactly: no sample, so no interval (interp run activation-patching gives intervals over "
                         "many pairs)") + "</sup>" + estimated)
    fig.update_layout(width=None, height=None, xaxis_automargin=True, xaxis_tickfont_size=11)
    if measured is not None:
        mark(fig, rows, where, pair, measured, clean_run)
    return style.apply(fig, subject=subject)


def view(source) -> View:
    """The patching view of an explorer whose pairs come from ``source(state)`` (``pairs.WindTunnelPairs`` or
    ``pairs.LanguagePairs``): its panel at the foot of the page's "main" place."""
    return View("patching", {"main": lambda state, at: panel(source(state))},
                lambda app, state: register(app, source(state)), lambda state: rules(source(state)))
