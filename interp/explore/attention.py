"""Attention in both explorers (``interp/explore.py`` on a wind tunnel, ``interp/explore_lm.py`` on a language
model): the figures, in the way of circuitsvis's attention views, and the wind-tunnel explorer's attention view
(``AttentionViews``: the patterns of a sequence, hypothesis marks, its panel and callbacks).

- ``pattern_figure``: one head's pattern with every token named on both axes (no tick is skipped: the figure
  grows with the sequence, ``PX_PER_TOKEN`` pixels a token, in a box at most ``BOX`` tall that scrolls); a
  sequence of more than ``FIT_TOKENS`` tokens is drawn whole in ``FIT_SIDE`` pixels, named as zooming in makes room;
- ``heads_figure``: every head of a layer side by side, one small map each, hover naming both tokens; a click
  on a head's map picks it for ``pattern_figure``;
- either on a linear or a log colour scale (``log``): plotly has no log colour scale, so the colour is
  log10 of the weight (floored at ``LOG_FLOOR``), the colour bar labelled in powers of ten and the hover
  giving the weight itself;
- a causal model's masked cells (a query's future keys, weight 0 by construction, not by what the model
  learned) left blank, as circuitsvis leaves them, never coloured as a weight of 0 or 1e-6 (``masked``);
- token labels in ``TICK_FONT``-pixel text, written level where a cell is wide enough for them, slanted where not.

Numbers are plain or powers of ten (``style.plain_numbers``), never SI prefixes.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from dash import Input, Output, dcc, html, no_update

from analyses import style
from analyses.base import AnalysisError
from analyses.qk_alignment import hypothesis_group

from ..errors import UserError
from .common import INLINE, RADIO, REFUSED, click_rule, message_figure, panel, radios, sized_graph

PX_PER_TOKEN = 17  # a tick label's row: 12-pixel text and its spacing
TICK_FONT = 12
CHAR_PX = 7.5  # about how wide a character of TICK_FONT-pixel sans-serif text is
LOG_FLOOR = 1e-6  # the smallest weight the log scale tells apart from 0
CELL = 230  # pixels per head in the grid of a layer's heads


def masked(pattern: torch.Tensor) -> torch.Tensor:
    """The cells of a [..., query, key] pattern that a causal mask hides (every key after its query), where the
    pattern is causal (all of them exactly 0); none where it is not (a model that attends ahead)."""
    n_q, n_k = pattern.shape[-2:]
    future = torch.ones(n_q, n_k, dtype=torch.bool).triu(1)
    return future if bool((pattern[..., future] == 0).all()) else torch.zeros_like(future)


def colour(pattern: torch.Tensor, log: bool) -> tuple[list, dict]:
    """What a heat map colours (the weight, or log10 of it; NaN, drawn blank, in masked cells) and its colour range
    and bar."""
    hidden = masked(pattern)
    if not log:
        return pattern.double().masked_fill(hidden, math.nan).tolist(), dict(zmin=0, zmax=1, colorbar=dict(title="weight"))
    low = int(math.log10(LOG_FLOOR))
    ticks = list(range(low, 1))
    return (pattern.double().clamp_min(LOG_FLOOR).log10().masked_fill(hidden, math.nan).tolist(),
            dict(zmin=low, zmax=0, colorbar=dict(title="weight (log)", tickvals=ticks,
                                                 ticktext=[style.number_text(10.0 ** t) for t in ticks])))


def weight_hover(pattern: torch.Tensor, log: bool, head: str = "") -> dict:
    """The hover of a pattern's cell: both tokens by name and the weight (on a log scale the colour is log10 of
    it, so the weight itself rides along as customdata); the labels are the axes' own, sent once."""
    weight = "%{customdata:.4g}" if log else "%{z:.4f}"
    hover = dict(hovertemplate=(f"{head}<br>" if head else "") + f"query %{{y}}<br>key %{{x}}<br>weight {weight}"
                                                                 "<extra></extra>", hoverongaps=False)
    if log:
        hover["customdata"] = pattern.tolist()
    return hover


LEVEL_SIDE = 900  # pixels: the widest the plot area grows to write the key labels level


def size_of(labels: list[str]) -> tuple[int, int]:
    """The side of the square plot area that names every one of the tokens ``labels`` and the key labels' angle:
    level (0) where cells wide enough for the longest label fit in ``LEVEL_SIDE`` pixels (the area grows to them),
    else slanted (-45); never upright: a level or slanted label reads without turning one's head."""
    n = max(len(labels), 1)
    side = max(360, PX_PER_TOKEN * n)
    level = (max((len(label) for label in labels), default=0) * CHAR_PX + 6) * n
    if level <= max(side, LEVEL_SIDE):
        return max(side, round(level)), 0
    return side, -45


FIT_TOKENS = 100  # a longer sequence's map fits in FIT_SIDE pixels, its labels shown as zooming in makes room
FIT_SIDE = 400  # with its title, ticks and colour bar in its box on a 1280x800 screen (a 650-pixel window)
BOX = "92vh"  # the attention view's scrolling box: at most this tall, so its sideways scrollbar is on screen
ZOOM_NOTE = "drag a box to zoom in: every token is named once there is room; double-click zooms out"


def pattern_figure(pattern: torch.Tensor, labels: list[str], title: str, log: bool = False) -> go.Figure:
    """One head's [query, key] pattern; every label on both axes; the figure's width and height are set
    (``size_of``) so that none is skipped. A sequence of more than ``FIT_TOKENS`` tokens (recall's 329) fits in a
    ``FIT_SIDE``-pixel square instead, plotly naming as many tokens as there is room for (every one, zoomed in)
    and its title saying how. The axes' ranges are the cells' own: the labels sit against the map."""
    z, scale = colour(pattern, log)
    n = len(labels)
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="Viridis", **scale, **weight_hover(pattern, log)))
    fitted = n > FIT_TOKENS
    every = dict(tickmode="auto", nticks=20) if fitted else dict(tickmode="array", tickvals=labels, ticktext=labels)
    every.update(tickfont=dict(size=TICK_FONT), automargin=True)
    side, angle = (FIT_SIDE, -45) if fitted else size_of(labels)
    if fitted:
        title = f"{title}<br><sup>{n} tokens: {ZOOM_NOTE}</sup>"
    fig.update_layout(title=title, xaxis=dict(title="key position", tickangle=angle, range=[-0.5, n - 0.5],
                                              constrain="domain", constraintoward="left", **every),
                      yaxis=dict(title="query position", range=[n - 0.5, -0.5], scaleanchor="x", constrain="domain",
                                 constraintoward="top", **every),  # square cells, against their labels
                      width=side + 330, height=side + (200 if fitted else 250), margin=dict(t=70, l=60, r=40, b=60))
    return style.plain_numbers(style.use_template(fig))


def heads_figure(patterns: torch.Tensor, labels: list[str], title: str, log: bool = False,
                 names: list[str] | None = None, chosen: int | None = None) -> go.Figure:
    """Every head's pattern ([head, query, key]) in a grid, one colour scale; ``names`` titles each head
    ("head 3" by default); the ``chosen`` one (shown in the single view) framed and its title saying so. A click
    names the head by its curveNumber."""
    n = patterns.shape[0]
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    names = names or [f"head {h}" for h in range(n)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.03,
                        vertical_spacing=0.12 / rows)
    _, scale = colour(patterns[:1], log)
    for h in range(n):
        z, _ = colour(patterns[h], log)
        fig.add_heatmap(z=z, x=labels, y=labels, coloraxis="coloraxis", **weight_hover(patterns[h], log, names[h]),
                        row=h // cols + 1, col=h % cols + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    if chosen is not None and 0 <= chosen < n:
        axis = "" if chosen == 0 else str(chosen + 1)
        fig.add_shape(type="rect", xref=f"x{axis} domain", yref=f"y{axis} domain", x0=-0.02, x1=1.02, y0=-0.02,
                      y1=1.02, line=dict(color="#d62728", width=3), fillcolor="rgba(0,0,0,0)")
        note = fig.layout.annotations[chosen]
        note.update(text=f"<b>{note.text} (shown above)</b>", font=dict(color="#d62728"))
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", cmin=scale["zmin"], cmax=scale["zmax"],
                                                  colorbar=scale["colorbar"]),
                      width=None, height=90 + CELL * rows, margin=dict(t=80, l=20, r=20, b=20))
    return style.plain_numbers(style.use_template(fig))


class AttentionViews:
    """The ``Explorer``'s attention views (a part of the class, see ``interp/explore.py``)."""

    def patterns(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> list[torch.Tensor]:
        """Per layer, this sequence's [head, query, key] attention patterns (a selective scan's effective attention
        as the one head of its layer: models/mamba.py writes it as |M| averaged over channels, every row
        normalised), cached per (checkpoint, sequence, ablation); refused for a model without either."""
        info = self.layout_info(index)
        if not info["attention"] and not info["scan"]:
            raise UserError(f"this {info['arch']} model has no attention: there are no attention patterns to show "
                            f"(every other view works)")
        key = ("patterns", index, tuple(tokens) if seed is None else seed, tuple(sorted(choices)))
        if key not in self._cache:
            batch = self.batch(tokens, seed)
            what = "the effective attention of the scan" if info["scan"] else "the attention patterns"
            with self.ablated(index, choices) as model, self.waits.on(f"{what} of this sequence"):
                self._cache[key] = [p[0].float() for p in model.attention_patterns(batch.tokens)]
            while len([k for k in self._cache if k[0] == "patterns"]) > 16:  # keep the newest only
                del self._cache[next(k for k in self._cache if k[0] == "patterns")]
        return self._cache[key]

    def attention_view(self, index: int, tokens: list, seed: int | None, choices: list[str],
                       layer: int, head: int, log: bool = False) -> go.Figure:
        """One head's pattern, every token named on both axes, keys naming a feasible or an eliminated
        hypothesis marked; ``log``: coloured by log10 of the weight."""
        info = self.layout_info(index)
        scan = info["scan"]
        if not info["attention"] and not scan:
            return message_figure(f"this {info['arch']} model has no attention: there are no attention "
                                   f"patterns to show (every other view works)")
        heads = info["n_heads"] if info["attention"] else 1
        if not all(isinstance(v, int) and 0 <= v < top for v, top in ((layer, info["n_layers"]), (head, heads))):
            raise UserError(f"layer {layer!r}, head {head!r} is not in this model ({info['n_layers']} layers of "
                            f"{heads} heads)")
        pattern = self.patterns(index, tokens, seed, choices)[layer][head]
        labels = self.names(tokens)
        title = (f"effective attention of the selective scan, layer {layer}<br><sup>mean |M| over channels, rows "
                 f"normalised</sup>" if scan else f"attention pattern, layer {layer}, head {head}")
        fig = pattern_figure(pattern, labels, title, log)
        batch = self.batch(tokens, seed)
        for kind, symbol, color, label in (("eliminated", "x-thin", "#d62728", "key names an eliminated hypothesis"),
                                           ("feasible", "circle-open", "#2ca02c", "key names a feasible hypothesis")):
            marks = self.hypothesis_marks(batch, kind)
            fig.add_scatter(x=[labels[k] for _, k in marks], y=[labels[q] for q, _ in marks], mode="markers",
                            name=label, hoverinfo="skip",
                            marker=dict(symbol=symbol, size=6, color=color, opacity=0.8, line=dict(width=1.5, color=color)))
        fig.update_layout(showlegend=True, legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom",
                                                       xref="container", yref="container"))
        fig.update_layout(margin=dict(b=fig.layout.margin.b + 40))
        return fig

    def heads_view(self, index: int, tokens: list, seed: int | None, choices: list[str], layer: int,
                   log: bool = False, head: int | None = None) -> go.Figure:
        """Every head of ``layer`` side by side (a selective scan: every layer's effective attention), the one the
        single view shows (``head``; a scan's: ``layer``) framed."""
        info = self.layout_info(index)
        patterns = self.patterns(index, tokens, seed, choices)
        if not isinstance(layer, int) or not 0 <= layer < info["n_layers"]:
            raise UserError(f"layer {layer!r} is not in this model ({info['n_layers']} layers)")
        labels = self.names(tokens)
        if info["scan"]:
            return heads_figure(torch.stack([p[0] for p in patterns]), labels,
                                "effective attention of every layer (click one to see it above)",
                                log, names=[f"layer {l}" for l in range(len(patterns))], chosen=layer)
        return heads_figure(patterns[layer], labels, f"every head of layer {layer} (click one to "
                                                     f"see it named token by token)", log, chosen=head)


    def hypothesis_marks(self, batch, kind: str) -> list[tuple[int, int]]:
        """(query, key) cells where the key token names a hypothesis the posterior at the query keeps
        (feasible, p > 0) or rules out (eliminated, p = 0); bijection: revealed values are eliminated."""
        try:
            _, ids = hypothesis_group(self.task)
        except AnalysisError:  # the task has no tokens naming its answer classes
            return []
        tokens = batch.tokens[0]
        where = {int(t): c for c, t in enumerate(ids.tolist())}
        keys = [(k, where[int(t)]) for k, t in enumerate(tokens.tolist()) if int(t) in where]
        marks = []
        for q in batch.query_mask[0].nonzero().flatten().tolist():
            for k, c in keys:
                if k <= q and (batch.posterior[0, q, c] > 0) == (kind == "feasible"):
                    marks.append((q, k))
        return marks



def attention_panel(info: dict):
    """Layer, head and colour scale; one head's pattern, and every head of the layer (a selective scan: every
    layer) below it. A model without attention (LSTM, MLP) has no attention panel at all."""
    return panel("attention", html.Div([
        radios("layer", info["n_layers"], "layer", **INLINE),
        html.Div(radios("head", max(info["n_heads"], 1), "head", **INLINE), style=dict(
            display="inline-block" if info["attention"] else "none")),
        html.Div([html.Label("colour "), dcc.RadioItems(
            id="scale", options=[{"label": "linear", "value": "linear"}, {"label": "log", "value": "log"}],
            value="linear", inline=True, inputStyle=RADIO)], style=INLINE)]),
        html.Div(sized_graph("attention"), id="attention-box", style=dict(overflow="auto", maxHeight=BOX)),
        sized_graph("heads"), minWidth="0", display="block" if info["attention"] or info["scan"] else "none")


def register(app, explorer, info: dict, ablations, chosen_ablations) -> None:
    """The attention view's callbacks: one head, every head of the layer, and a click on the grid picking one."""

    @app.callback(Output("attention", "figure"), Input("step", "value"), Input("sequence", "data"), *ablations,
                  Input("layer", "value"), Input("head", "value"), Input("scale", "value"))
    def attention(index, sequence, heads, blocks, mode, layer, head, scale):
        try:
            return explorer.attention_view(index, sequence["tokens"], sequence["seed"],
                                           chosen_ablations(heads, blocks, mode), layer, head, scale == "log")
        except REFUSED as err:
            return message_figure(str(err))

    @app.callback(Output("heads", "figure"), Input("step", "value"), Input("sequence", "data"), *ablations,
                  Input("layer", "value"), Input("scale", "value"), Input("head", "value"))
    def every_head(index, sequence, heads, blocks, mode, layer, scale, head):
        try:
            return explorer.heads_view(index, sequence["tokens"], sequence["seed"],
                                       chosen_ablations(heads, blocks, mode), layer, scale == "log", head)
        except REFUSED as err:
            return message_figure(str(err))

    @app.callback(Output("layer", "value"), Output("head", "value"), Input("heads", "clickData"),
                  prevent_initial_call=True)
    def pick_head(click):  # a click on one head of the grid (a layer, for a selective scan) shows it above
        if not click:
            return no_update, no_update
        picked = click["points"][0]["curveNumber"]
        return (picked, no_update) if info["scan"] else (no_update, picked)


def rules(info: dict) -> dict:
    """The request rules of the attention view's controls (the rest are ``requests.explorer_rules``)."""
    from ..requests import one_of

    return {("scale", "value"): one_of("linear", "log"),
            ("heads", "clickData"): click_rule("a map", info["n_layers"] if info["scan"] else max(info["n_heads"], 1))}
