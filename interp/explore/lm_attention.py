"""The language-model explorer's attention view: one layer and query head's pattern, the tokens' text on both axes,
and a grid of every query head of the layer (the figures are ``attention_maps``, as the wind tunnel's); the layer,
head and colour-scale controls above them; a click on the grid picks its head.
"""
from __future__ import annotations

import plotly.graph_objects as go
from dash import Input, Output, dcc, html, no_update

from models.base import act_name

from ..errors import UserError
from ..requests import integer, one_of
from .attention_maps import BOX, heads_figure, pattern_figure
from .common import REFUSED, click_rule, message_figure, panel, radios, sized_graph
from .page import View


def check_place(state, layer, head=0) -> None:
    cfg = state.lm.model.cfg
    if not (isinstance(layer, int) and 0 <= layer < cfg.n_layers and isinstance(head, int) and 0 <= head < cfg.n_heads):
        raise UserError(f"layer {layer!r}, head {head!r} out of range: {state.lm.name} has {cfg.n_layers} layers "
                        f"of {cfg.n_heads} query heads")


def attention_view(state, ids: list[int], layer: int, head: int, log: bool = False) -> go.Figure:
    """One query head's pattern, every token's text on both axes (``attention_maps.pattern_figure``)."""
    check_place(state, layer, head)
    pattern = state.run(ids)["cache"][act_name("pattern", layer)][head]
    cfg = state.lm.model.cfg
    group = cfg.n_heads // (getattr(cfg, "n_key_value_heads", None) or cfg.n_heads)
    shared = f" (key/value head {head // group})" if group > 1 else ""
    return pattern_figure(pattern, state.labels(ids), f"{state.lm.name}: attention, layer {layer} query head "
                          f"{head}{shared}", log)


def grid_view(state, ids: list[int], layer: int, log: bool = False, head: int | None = None) -> go.Figure:
    """Every query head of ``layer`` side by side (``attention_maps.heads_figure``), ``head`` framed."""
    check_place(state, layer)
    patterns = state.run(ids)["cache"][act_name("pattern", layer)]
    return heads_figure(patterns, state.labels(ids), f"{state.lm.name}: every query head of layer {layer} (click one "
                        f"to see it named token by token)", log, chosen=head)


def controls(state, at) -> html.Div:
    cfg = state.lm.model.cfg
    return panel("layer and head", radios("layer", cfg.n_layers, "layer", marginTop="4px"),
                 radios("head", cfg.n_heads, "query head", marginTop="4px"),
                 html.Div([html.Label("colour "), dcc.RadioItems(
                     id="scale", options=[{"label": "linear", "value": "linear"}, {"label": "log", "value": "log"}],
                     value="linear", inline=True, inputStyle=dict(marginLeft="6px", marginRight="2px"))],
                     style=dict(marginTop="4px")), minWidth="0")


def pattern_panel(state, at) -> html.Div:
    return panel("attention", html.Div(sized_graph("attention"), style=dict(overflow="auto", maxHeight=BOX)),
                 minWidth="0")


def grid_panel(state, at) -> html.Div:
    return panel("every head of the layer", sized_graph("grid"), minWidth="0")


def register(app, state) -> None:
    @app.callback(Output("attention", "figure"), Output("grid", "figure"), Input("prompt", "data"),
                  Input("layer", "value"), Input("head", "value"), Input("scale", "value"))
    def views(prompt, layer, head, scale):
        try:
            ids, log = state.encode(prompt["text"]), scale == "log"
            return attention_view(state, ids, layer, head, log), grid_view(state, ids, layer, log, head)
        except REFUSED as err:
            message = message_figure(str(err))
            return message, message

    @app.callback(Output("head", "value"), Input("grid", "clickData"), prevent_initial_call=True)
    def pick_head(click):  # a click on one head of the grid shows it named token by token
        return click["points"][0]["curveNumber"] if click else no_update


def rules(state) -> dict:
    cfg = state.lm.model.cfg
    return {("layer", "value"): integer(0, cfg.n_layers), ("head", "value"): integer(0, cfg.n_heads),
            ("scale", "value"): one_of("linear", "log"),
            ("grid", "clickData"): click_rule("the grid of heads", cfg.n_heads, named=False)}


VIEW = View("attention", {"top": controls, "pair": pattern_panel, "main": grid_panel}, register, rules)
