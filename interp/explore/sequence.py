"""The wind-tunnel explorer's sequence view: a held-out sequence sampled with a seed (``analyses.base.held_out_batch``),
or tokens typed by hand, whose exact posterior the task reads back from the tokens (``Task.batch_from_tokens``),
kept in the page's ``sequence`` store that every view reads; and the step slider over the checkpoints of a run.
Its panel holds the numbers view's download and Python (places "sequence row" and "sequence").
"""
from __future__ import annotations

import torch
from dash import Input, Output, State, ctx, dcc, html, no_update

from tasks.base import SEED_RANGE, is_seed

from ..errors import UserError
from ..requests import integer, scalar, sequence_rule, text
from .common import CLICKS, panel
from .page import View


def part(state, at) -> list:
    """The store of the sequence shown (seed 0 to begin with), and the panel choosing it."""
    first, steps = state.sample(0), state.steps
    controls = html.Div([
        html.Div([
            html.Label("seed "), dcc.Input(id="seed", type="number", value=0, min=0, step=1, style=dict(width="80px")),
            html.Button("sample", id="sample", n_clicks=0, style=dict(marginLeft="6px")),
            html.Span(" or edit the tokens and ", style=dict(marginLeft="12px")),
            html.Button("apply", id="apply", n_clicks=0),
            html.Span(id="message", style=dict(color="#b00", marginLeft="12px")),
            *at("sequence row"),
        ]),
        dcc.Textarea(id="tokens-text", value=" ".join(state.task.token_names(torch.tensor(first))),
                     style=dict(width="100%", height="44px", fontFamily="monospace", marginTop="6px")),
        html.Div([html.Label(f"checkpoint ({len(steps)}): "), html.Span(id="step-label")],
                 style=dict(marginTop="6px")),
        html.Div(dcc.Slider(id="step", min=0, max=state.last, step=None, value=state.last,
                            marks={i: str(s) for i, s in enumerate(steps)}),
                 style=dict(display="block" if len(steps) > 1 else "none")),
        *at("sequence"),
    ])
    return [dcc.Store(id="sequence", data=dict(tokens=first, seed=0)), panel("sequence", controls)]


def register(app, state) -> None:
    @app.callback(Output("sequence", "data"), Output("tokens-text", "value"), Output("message", "children"),
                  Input("sample", "n_clicks"), Input("apply", "n_clicks"), State("seed", "value"),
                  State("tokens-text", "value"), prevent_initial_call=True)
    def choose_sequence(_sample, _apply, seed, typed):
        try:
            if ctx.triggered_id == "sample":
                seed = seed or 0
                if not is_seed(seed):
                    raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
                tokens = state.sample(seed)
                return (dict(tokens=tokens, seed=seed),
                        " ".join(state.task.token_names(torch.tensor(tokens))), "")
            tokens = state.typed(typed or "")
            return dict(tokens=tokens, seed=None), no_update, ""
        except UserError as err:
            return no_update, no_update, str(err)


def rules(state) -> dict:
    return {("sample", "n_clicks"): CLICKS, ("apply", "n_clicks"): CLICKS, ("seed", "value"): scalar(),
            ("tokens-text", "value"): text(), ("step", "value"): integer(0, len(state.checkpoints)),
            ("sequence", "data"): sequence_rule(state)}


VIEW = View("sequence", {"top": part}, register, rules)
