"""The wind-tunnel explorer's ablation view: the panel of ticks that chooses which heads are zeroed or set to their
mean output and which blocks are skipped (applied to every view at once, ``hooks.ablated``), and head-ablation's
map (in the held-out calibration panel), whose cells ablate their head when clicked.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html, no_update

from analyses import style

from ..errors import UserError
from ..requests import one_of, subset
from .common import CLICKS, RADIO, REFUSED, click_rule, graph, message_figure, panel
from .computed import held_out_calibration
from .page import View


def ablation_map_view(state, index: int, kind: str) -> go.Figure:
    """head-ablation's heat map of ``kind`` ("zero" or "mean"): every head ablated in turn on the held-out
    sequences, computed by the analysis itself once per checkpoint (both kinds at once)."""
    from analyses import head_ablation

    info = state.layout_info(index)
    if not info["attention"]:
        return message_figure(f"this {info['arch']} model has no attention heads to ablate")
    if kind not in head_ablation.KINDS:
        raise UserError(f"ablation kind {kind!r}; the map has {' and '.join(head_ablation.KINDS)}")
    key = ("head-ablation", index)
    if key not in state.cache:
        # the intact model's MAE on the same sequences, with calibration's interval (head-ablation's title
        # gives the MAE; each cell's hover its ratio's paired interval)
        low, high = held_out_calibration(state, index, [])["intervals"]["entropy_mae_bits"]
        with state.lock, state.waits.on(f"head-ablation: each of {info['n_layers'] * info['n_heads']} heads "
                                        f"zeroed and mean-ablated in turn on {state.n_calibration} sequences"):
            result = head_ablation.compute(state.model(index), n=state.n_calibration, seed=state.seed)
            for fig in result.figures.values():
                style.apply(fig, subject=state.task.name, replaces=state.task.name)
                fig.update_layout(width=None, title_text=fig.layout.title.text.replace("</sup>", "") + (
                    f", seed {state.seed}; the intact MAE's 95% interval {low:.4f}-{high:.4f} bits, each "
                    f"cell's paired 95% interval in its hover; interp run head-ablation uses "
                    f"{cli_default_n():,} sequences unless given --n {state.n_calibration} "
                    f"--seed {state.seed}</sup>"))
            state.cache[key] = result.figures
    return state.cache[key][f"{kind}-ablation"]


def cli_default_n() -> int:
    """How many sequences ``interp run head-ablation`` uses unless told (its ``--n``)."""
    from analyses import head_ablation

    return next(o.default for o in head_ablation.ANALYSIS.options if o.name == "n")


def heads(info: dict) -> list[tuple[int, int]]:
    """Every (layer, head) of the page's model, in the order its ticks are listed."""
    return [(l, h) for l in range(info["n_layers"]) for h in range(info["n_heads"])]


def controls(state, at) -> html.Div:
    """The ablation panel: which heads (zeroed or set to their mean) and which blocks (skipped)."""
    info = state.info
    head_options = [{"label": f"L{l} H{h}", "value": f"H{l}.{h}"} for l, h in heads(info)]
    block_options = [{"label": f"block {l}", "value": f"B{l}"} for l in info["blocks"]]
    return panel(
        "ablate",
        html.Div("heads: output z set to" if head_options else f"no attention heads in this {info['arch']} model"),
        dcc.RadioItems(id="ablate-mode", options=[{"label": "0", "value": "zero"},
                                                  {"label": "its mean", "value": "mean"}], value="zero", inline=True,
                       inputStyle=dict(RADIO, marginLeft="6px"),
                       style=dict(display="block" if head_options else "none")),
        dcc.Checklist(id="ablate-heads", options=head_options, value=[], inputStyle=dict(marginRight="3px"),
                      labelStyle=dict(display="inline-block", width="70px")),
        html.Div("blocks (skipped: output = input)", style=dict(marginTop="8px")),
        dcc.Checklist(id="ablate-blocks", options=block_options, value=[], inputStyle=dict(marginRight="3px"),
                      labelStyle=dict(display="block")),
        html.Div(id="calibration-summary", style=dict(marginTop="10px", fontSize="13px")),
    )


def map_panel(state, at) -> html.Details:
    """head-ablation's map, computed when asked for (every head ablated in turn on the held-out sequences); it says
    how many, beside the number ``interp run head-ablation`` uses by default (the numbers differ with them)."""
    n, seed = state.n_calibration, state.seed
    return html.Details([
        html.Summary(f"every head ablated in turn (head-ablation on {n:,} held-out sequences, seed {seed}; "
                     f"interp run head-ablation uses {cli_default_n():,} unless given --n)"),
        html.Div("A click on a head's cell ablates that head alone (as the map's 0 or mean) in every view, its "
                 "answers beside Bayes's in the posterior view.", style=dict(fontSize="13px", margin="4px 0")),
        html.Button("compute the map", id="ablation-map-run", n_clicks=0),
        graph("ablation-map", 360, until="press \"compute the map\": every head ablated in turn")],
        style=dict(display="block" if state.info["attention"] else "none", marginTop="6px"))


def register(app, state) -> None:
    """The map's callback, and a click on one of its cells ablating that head."""

    @app.callback(Output("ablation-map", "figure"), Input("ablation-map-run", "n_clicks"), Input("ablate-mode", "value"),
                  State("step", "value"), prevent_initial_call=True)
    def ablation_map(clicks, mode, index):
        if not clicks:
            return no_update
        try:
            return ablation_map_view(state, index, mode)
        except REFUSED as err:
            return message_figure(str(err))

    @app.callback(Output("ablate-heads", "value"), Output("ablate-blocks", "value"),
                  Input("ablation-map", "clickData"), prevent_initial_call=True)
    def ablate_clicked(click):  # that head alone, ablated as the map shows it (the mode radio stays)
        cell = re.fullmatch(r"L(\d+)", str(click["points"][0].get("y"))) if click else None
        head = re.fullmatch(r"H(\d+)", str(click["points"][0].get("x"))) if click else None
        if not (cell and head):
            return no_update, no_update
        return [f"H{cell[1]}.{head[1]}"], []


def rules(state) -> dict:
    """The ticks (heads and blocks the page's model has), the mode, and the head-ablation map's button and cells."""
    info = state.info
    return {("ablate-heads", "value"): subset([f"H{l}.{h}" for l, h in heads(info)]),
            ("ablate-blocks", "value"): subset([f"B{layer}" for layer in info["blocks"]]),
            ("ablate-mode", "value"): one_of("zero", "mean"),
            ("ablation-map", "clickData"): click_rule("a map"), ("ablation-map-run", "n_clicks"): CLICKS}


VIEW = View("ablation", {"side": controls, "held-out": map_panel}, register, rules)
