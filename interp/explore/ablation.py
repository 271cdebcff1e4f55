"""The wind-tunnel explorer's ablations: heads zeroed or set to their mean output at ``hook_z``
(``activations.ablation_hook``), blocks skipped (``activations.part_hooks``), applied to every view at once
(``AblationViews.ablated``); the panel of ticks that chooses them, and head-ablation's map, whose cells ablate
their head when clicked.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html, no_update

from analyses import style
from analyses.activations import ablation_hook, mean_z, part_hooks, z_hook_name

from ..errors import UserError
from .common import REFUSED, RADIO, graph, message_figure, panel


def ablation_hooks(choices: list[str], model, means=None) -> list:
    """Hooks for the chosen ablations: ``"H1.2"`` zeroes head 2 of layer 1, ``"M1.2"`` sets it to its mean
    output (``means()[layer][head]``, head-ablation's mean z), ``"B0"`` skips block 0; anything else, or a
    layer or head ``model`` lacks, is refused."""
    hooks = []
    for choice in sorted(choices or [], key=str):
        match = re.fullmatch(r"([HM])(\d+)\.(\d+)|B(\d+)", choice, re.ASCII) if isinstance(choice, str) else None
        layer, head = int(match[2] or match[4]) if match else 0, int(match[3] or 0) if match else 0
        heads = getattr(model.cfg, "n_heads", 0) if model.has_attention() else 0  # an LSTM or an MLP has none
        if match is None or layer >= model.cfg.n_layers or (match[3] is not None and head >= heads):
            raise UserError(f"unknown ablation {choice!r}; heads are H<layer>.<head> (zero) or M<layer>.<head> "
                            f"(mean), blocks B<layer>, within the model's {model.cfg.n_layers} layers of "
                            f"{heads} heads")
        if match[4] is not None:
            hooks += part_hooks("block", layer)
        elif match[1] == "M" and means is None:
            raise UserError("mean ablation needs the heads' mean outputs, which this view does not have")
        else:
            hooks.append((z_hook_name(layer), ablation_hook(head, means()[layer][head] if match[1] == "M" else None)))
    return hooks


def chosen_ablations(heads: list[str], blocks: list[str], mode: str) -> list[str]:
    """The ablation choices of the controls: the ticked heads ("H<l>.<h>") zeroed or, in mean mode, set to
    their mean output ("M<l>.<h>"), and the ticked blocks."""
    return [("M" + h[1:]) if mode == "mean" else h for h in heads or []] + list(blocks or [])


class AblationViews:
    """The ``Explorer``'s ablations and head-ablation's map (a part of the class, see ``interp/explore.py``)."""

    def ablated_by_controls(self, index: int, heads: list[str], blocks: list[str], mode: str):
        """``ablated`` with the choices as the page's ablation controls give them."""
        return self.ablated(index, chosen_ablations(heads, blocks, mode))

    @contextmanager
    def ablated(self, index: int, choices: list[str], model=None):
        """The model at slider position ``index`` with ``choices`` ablated, while the context lasts. Given ``model``
        (a copy of that one, a background job's own), it is ablated instead, and the explorer's lock is held only
        while its hooks are made: the job runs on it while the other views are served."""
        with self.lock:
            own = model is None
            model = self.model(index) if own else model
            hooks = ablation_hooks(choices, model, means=lambda: self.mean_outputs(index))
            if any(name not in model.hook_dict for name, _ in hooks):
                raise UserError(f"ablations {sorted(choices)} name a part this model does not have")
            if own:
                with model.hooks(fwd_hooks=hooks):
                    yield model
                return
        with model.hooks(fwd_hooks=hooks):
            yield model

    def mean_outputs(self, index: int) -> list:
        """Per layer and head, the intact model's mean z over the held-out batch (for mean ablation)."""
        key = ("mean-z", index)
        if key not in self._cache:
            with self.lock, self.waits.on(f"mean head outputs on {self.n_calibration} held-out sequences"):
                # called under ``ablated`` before its hooks are on, so the model is intact
                self._cache[key] = mean_z(self.model(index), self.held_out().tokens)
        return self._cache[key]


    def ablation_map_view(self, index: int, kind: str) -> go.Figure:
        """head-ablation's heat map of ``kind`` ("zero" or "mean"): every head ablated in turn on the held-out
        sequences, computed by the analysis itself once per checkpoint (both kinds at once)."""
        from analyses import head_ablation

        info = self.layout_info(index)
        if not info["attention"]:
            return message_figure(f"this {info['arch']} model has no attention heads to ablate")
        if kind not in head_ablation.KINDS:
            raise UserError(f"ablation kind {kind!r}; the map has {' and '.join(head_ablation.KINDS)}")
        key = ("head-ablation", index)
        if key not in self._cache:
            # the intact model's MAE on the same sequences, with calibration's interval (head-ablation's title
            # gives the MAE; each cell's hover its ratio's paired interval)
            low, high = self.held_out_calibration(index, [])["intervals"]["entropy_mae_bits"]
            with self.lock, self.waits.on(f"head-ablation: each of {info['n_layers'] * info['n_heads']} heads "
                                          f"zeroed and mean-ablated in turn on {self.n_calibration} sequences"):
                result = head_ablation.compute(self.model(index), n=self.n_calibration, seed=self.seed)
                for fig in result.figures.values():
                    style.apply(fig, subject=self.task.name, replaces=self.task.name)
                    fig.update_layout(width=None, title_text=fig.layout.title.text.replace("</sup>", "") + (
                        f", seed {self.seed}; the intact MAE's 95% interval {low:.4f}-{high:.4f} bits, each "
                        f"cell's paired 95% interval in its hover; interp run head-ablation uses "
                        f"{cli_default_n():,} sequences unless given --n {self.n_calibration} "
                        f"--seed {self.seed}</sup>"))
                self._cache[key] = result.figures
        return self._cache[key][f"{kind}-ablation"]



def controls(info: dict) -> html.Div:
    """The ablation panel: which heads (zeroed or set to their mean) and which blocks (skipped)."""
    head_options = [{"label": f"L{l} H{h}", "value": f"H{l}.{h}"}
                    for l in range(info["n_layers"]) for h in range(info["n_heads"])]
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


# the ablation controls as a callback's inputs: every view follows them
INPUTS = (Input("ablate-heads", "value"), Input("ablate-blocks", "value"), Input("ablate-mode", "value"))


def cli_default_n() -> int:
    """How many sequences ``interp run head-ablation`` uses unless told (its ``--n``)."""
    from analyses import head_ablation

    return next(o.default for o in head_ablation.ANALYSIS.options if o.name == "n")


def map_panel(info: dict, n: int, seed: int) -> html.Details:
    """head-ablation's map, computed when asked for (every head ablated in turn on the held-out sequences); it says
    how many, beside the number ``interp run head-ablation`` uses by default (the numbers differ with them)."""
    return html.Details([
        html.Summary(f"every head ablated in turn (head-ablation on {n:,} held-out sequences, seed {seed}; "
                     f"interp run head-ablation uses {cli_default_n():,} unless given --n)"),
        html.Div("A click on a head's cell ablates that head alone (as the map's 0 or mean) in every view, its "
                 "answers beside Bayes's in the posterior view.", style=dict(fontSize="13px", margin="4px 0")),
        html.Button("compute the map", id="ablation-map-run", n_clicks=0),
        graph("ablation-map", 360)], style=dict(display="block" if info["attention"] else "none", marginTop="6px"))


def register(app, explorer) -> None:
    """The map's callback, and a click on one of its cells ablating that head."""

    @app.callback(Output("ablation-map", "figure"), Input("ablation-map-run", "n_clicks"), Input("ablate-mode", "value"),
                  State("step", "value"), prevent_initial_call=True)
    def ablation_map_view(clicks, mode, index):
        if not clicks:
            return no_update
        try:
            return explorer.ablation_map_view(index, mode)
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


def rules() -> dict:
    """The request rules of the head-ablation map's button and cells (the ticks are ``requests.explorer_rules``)."""
    from .common import click_rule
    from ..requests import MAX_CLICKS, integer

    return {("ablation-map", "clickData"): click_rule("a map"), ("ablation-map-run", "n_clicks"):
            integer(0, MAX_CLICKS, optional=True)}
