"""The wind-tunnel explorer's attention view: the attention pattern of one layer and head, every token named on both
axes (``Task.position_names``), keys naming a feasible or an eliminated hypothesis marked (the task's hypothesis
tokens, as in ``qk_alignment.hypothesis_group``), and every head of the layer side by side, on a linear or log
colour scale (the figures are ``attention_maps``); a selective scan's effective attention as one head per layer.
The panel is shown only where the model has attention (or a selective scan).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output, dcc, html, no_update

from analyses.base import AnalysisError
from analyses.qk_alignment import hypothesis_group

from ..errors import UserError
from ..requests import integer, one_of
from .attention_maps import BOX, heads_figure, pattern_figure
from .common import INLINE, RADIO, REFUSED, click_rule, message_figure, panel, radios, sized_graph
from .hooks import CONTROLS, ablated, chosen_ablations
from .page import View

KEEP_PATTERNS = 16  # sequences whose patterns are kept (the newest)


def patterns(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> list[torch.Tensor]:
    """Per layer, this sequence's [head, query, key] attention patterns (a selective scan's effective attention
    as the one head of its layer: models/mamba.py writes it as |M| averaged over channels, every row
    normalised), cached per (checkpoint, sequence, ablation); refused for a model without either."""
    info = state.layout_info(index)
    if not info["attention"] and not info["scan"]:
        raise UserError(f"this {info['arch']} model has no attention: there are no attention patterns to show "
                        f"(every other view works)")
    key = ("patterns", index, tuple(tokens) if seed is None else seed, tuple(sorted(choices)))
    if key not in state.cache:
        batch = state.batch(tokens, seed)
        what = "the effective attention of the scan" if info["scan"] else "the attention patterns"
        with ablated(state, index, choices) as model, state.waits.on(f"{what} of this sequence"):
            state.cache[key] = [p[0].float() for p in model.attention_patterns(batch.tokens)]
        state.keep_newest("patterns", KEEP_PATTERNS)
    return state.cache[key]


def attention_view(state, index: int, tokens: list, seed: int | None, choices: list[str],
                   layer: int, head: int, log: bool = False) -> go.Figure:
    """One head's pattern, every token named on both axes, keys naming a feasible or an eliminated
    hypothesis marked; ``log``: coloured by log10 of the weight."""
    info = state.layout_info(index)
    scan = info["scan"]
    if not info["attention"] and not scan:
        return message_figure(f"this {info['arch']} model has no attention: there are no attention "
                               f"patterns to show (every other view works)")
    heads = info["n_heads"] if info["attention"] else 1
    if not all(isinstance(v, int) and 0 <= v < top for v, top in ((layer, info["n_layers"]), (head, heads))):
        raise UserError(f"layer {layer!r}, head {head!r} is not in this model ({info['n_layers']} layers of "
                        f"{heads} heads)")
    pattern = patterns(state, index, tokens, seed, choices)[layer][head]
    labels = state.names(tokens)
    title = (f"effective attention of the selective scan, layer {layer}<br><sup>mean |M| over channels, rows "
             f"normalised</sup>" if scan else f"attention pattern, layer {layer}, head {head}")
    fig = pattern_figure(pattern, labels, title, log)
    batch = state.batch(tokens, seed)
    for kind, symbol, color, label in (("eliminated", "x-thin", "#d62728", "key names an eliminated hypothesis"),
                                       ("feasible", "circle-open", "#2ca02c", "key names a feasible hypothesis")):
        marks = hypothesis_marks(state, batch, kind)
        fig.add_scatter(x=[labels[k] for _, k in marks], y=[labels[q] for q, _ in marks], mode="markers",
                        name=label, hoverinfo="skip",
                        marker=dict(symbol=symbol, size=6, color=color, opacity=0.8, line=dict(width=1.5, color=color)))
    fig.update_layout(showlegend=True, legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom",
                                                   xref="container", yref="container"))
    fig.update_layout(margin=dict(b=fig.layout.margin.b + 40))
    return fig


def heads_view(state, index: int, tokens: list, seed: int | None, choices: list[str], layer: int,
               log: bool = False, head: int | None = None) -> go.Figure:
    """Every head of ``layer`` side by side (a selective scan: every layer's effective attention), the one the
    single view shows (``head``; a scan's: ``layer``) framed."""
    info = state.layout_info(index)
    layers = patterns(state, index, tokens, seed, choices)
    if not isinstance(layer, int) or not 0 <= layer < info["n_layers"]:
        raise UserError(f"layer {layer!r} is not in this model ({info['n_layers']} layers)")
    labels = state.names(tokens)
    if info["scan"]:
        return heads_figure(torch.stack([p[0] for p in layers]), labels,
                            "effective attention of every layer (click one to see it above)",
                            log, names=[f"layer {l}" for l in range(len(layers))], chosen=layer)
    return heads_figure(layers[layer], labels, f"every head of layer {layer} (click one to "
                                                 f"see it named token by token)", log, chosen=head)


def hypothesis_marks(state, batch, kind: str) -> list[tuple[int, int]]:
    """(query, key) cells where the key token names a hypothesis the posterior at the query keeps
    (feasible, p > 0) or rules out (eliminated, p = 0); bijection: revealed values are eliminated."""
    try:
        _, ids = hypothesis_group(state.task)
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


def attention_panel(state, at):
    """Layer, head and colour scale; one head's pattern, and every head of the layer (a selective scan: every
    layer) below it. A model without attention (LSTM, MLP) has no attention panel at all."""
    info = state.info
    return panel("attention", html.Div([
        radios("layer", info["n_layers"], "layer", **INLINE),
        html.Div(radios("head", max(info["n_heads"], 1), "head", **INLINE), style=dict(
            display="inline-block" if info["attention"] else "none")),
        html.Div([html.Label("colour "), dcc.RadioItems(
            id="scale", options=[{"label": "linear", "value": "linear"}, {"label": "log", "value": "log"}],
            value="linear", inline=True, inputStyle=RADIO)], style=INLINE)]),
        html.Div(sized_graph("attention"), id="attention-box", style=dict(overflow="auto", maxHeight=BOX)),
        sized_graph("heads"), minWidth="0", display="block" if info["attention"] or info["scan"] else "none")


def register(app, state) -> None:
    """The attention view's callbacks: one head, every head of the layer, and a click on the grid picking one."""

    @app.callback(Output("attention", "figure"), Input("step", "value"), Input("sequence", "data"), *CONTROLS,
                  Input("layer", "value"), Input("head", "value"), Input("scale", "value"))
    def attention(index, sequence, heads, blocks, mode, layer, head, scale):
        try:
            return attention_view(state, index, sequence["tokens"], sequence["seed"],
                                  chosen_ablations(heads, blocks, mode), layer, head, scale == "log")
        except REFUSED as err:
            return message_figure(str(err))

    @app.callback(Output("heads", "figure"), Input("step", "value"), Input("sequence", "data"), *CONTROLS,
                  Input("layer", "value"), Input("scale", "value"), Input("head", "value"))
    def every_head(index, sequence, heads, blocks, mode, layer, scale, head):
        try:
            return heads_view(state, index, sequence["tokens"], sequence["seed"],
                              chosen_ablations(heads, blocks, mode), layer, scale == "log", head)
        except REFUSED as err:
            return message_figure(str(err))

    @app.callback(Output("layer", "value"), Output("head", "value"), Input("heads", "clickData"),
                  prevent_initial_call=True)
    def pick_head(click):  # a click on one head of the grid (a layer, for a selective scan) shows it above
        if not click:
            return no_update, no_update
        picked = click["points"][0]["curveNumber"]
        return (picked, no_update) if state.info["scan"] else (no_update, picked)


def rules(state) -> dict:
    """The layer, head and colour scale, and a click on the grid (a head, or a selective scan's layer)."""
    info = state.info
    return {("layer", "value"): integer(0, max(info["n_layers"], 1)),
            ("head", "value"): integer(0, max(info["n_heads"], 1)),
            ("scale", "value"): one_of("linear", "log"),
            ("heads", "clickData"): click_rule("a map", info["n_layers"] if info["scan"] else max(info["n_heads"], 1))}


VIEW = View("attention", {"main": attention_panel}, register, rules)
