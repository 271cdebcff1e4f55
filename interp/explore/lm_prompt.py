"""The language-model explorer's prompt view: typed text, or a prompt of a prompt task (two-label, coin) drawn
with a seed, kept in the page's ``prompt`` store that every view reads; for a drawn prompt, the exact Bayes
predictive over its answer tokens beside the model's (both from ``analyses.activations``).
"""
from __future__ import annotations

import torch
from dash import Input, Output, State, ctx, dcc, html, no_update

from analyses import activations
from tasks import prompts as prompt_tasks
from tasks.base import SEED_LIMIT, SEED_RANGE, is_seed

from ..errors import UserError
from ..requests import Refused, integer, one_of, scalar, text
from .common import CLICKS, INLINE, REFUSED, panel
from .page import View


def sample(state, task: str, seed: int) -> dict:
    """A prompt of prompt task ``task`` (one per number of shown examples, the seed picks one), with the
    exact Bayes predictive over its answer tokens."""
    if not is_seed(seed):
        raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
    prompt_set = activations.prompt_set(state.lm, task, "mixed", 1, 0.9, seed)
    prompt = prompt_set.prompts[seed % len(prompt_set.prompts)]
    return dict(text=state.lm.tokenizer.decode(prompt.tokens), answers=list(prompt_set.answers),
                bayes=prompt.bayes.tolist(), task=task)


def answer_summary(state, ids: list[int], sampled: dict | None) -> str:
    """The model's answer over a sampled prompt's answer tokens beside the Bayes predictive."""
    if not sampled:
        return ""
    logits = state.run(ids)["logits"][-1]
    model = torch.softmax(logits[sampled["answers"]].double(), -1).tolist()
    names = [state.lm.tokenizer.decode([a]).strip() for a in sampled["answers"]]
    mass = torch.softmax(logits.double(), -1)[sampled["answers"]].sum().item()
    return (f"{sampled['task']} prompt: Bayes predictive " + ", ".join(f"{n} {p:.3f}" for n, p in zip(names, sampled["bayes"]))
            + "; model (renormalised over the answers) " + ", ".join(f"{n} {p:.3f}" for n, p in zip(names, model))
            + f"; the model puts {mass:.1%} of its next-token probability on the answers")


def part(state, at) -> list:
    """The store of the prompt shown, and the panel choosing it (with the drawn prompt's answers below)."""
    initial = state.initial
    return [dcc.Store(id="prompt", data=dict(text=initial, task=None, seed=None)),
            panel("prompt",
                  dcc.Textarea(id="prompt-text", value=initial,
                               style=dict(width="100%", height="60px", fontFamily="monospace")),
                  html.Div([html.Button("apply", id="apply", n_clicks=0, style=INLINE),
                            html.Span("or draw a prompt of ", style=dict(marginRight="4px")),
                            dcc.Dropdown(id="task", options=list(prompt_tasks.NAMES), value="two-label",
                                         clearable=False,
                                         style=dict(width="160px", display="inline-block", verticalAlign="middle")),
                            html.Label(" seed ", style=dict(marginLeft="8px")),
                            dcc.Input(id="seed", type="number", value=0, min=0, step=1, style=dict(width="80px")),
                            html.Button("draw", id="draw", n_clicks=0, style=dict(marginLeft="6px")),
                            html.Span(id="message", style=dict(color="#b00", marginLeft="12px"))]),
                  html.Div(id="answer", style=dict(marginTop="6px", fontSize="13px")), minWidth="0")]


def register(app, state) -> None:
    @app.callback(Output("prompt", "data"), Output("prompt-text", "value"), Output("message", "children"),
                  Input("apply", "n_clicks"), Input("draw", "n_clicks"), State("prompt-text", "value"),
                  State("task", "value"), State("seed", "value"), prevent_initial_call=True)
    def choose(_apply, _draw, typed, task, seed):
        try:
            if ctx.triggered_id == "draw":
                sampled = sample(state, task, seed or 0)
                return dict(text=sampled["text"], task=task, seed=seed or 0), sampled["text"], ""
            state.encode(typed or "")
            return dict(text=typed, task=None, seed=None), no_update, ""
        except REFUSED as err:
            return no_update, no_update, str(err)

    @app.callback(Output("answer", "children"), Input("prompt", "data"))
    def answer(prompt):
        try:
            ids = state.encode(prompt["text"])
            sampled = sample(state, prompt["task"], prompt["seed"]) if prompt["task"] else None
            return answer_summary(state, ids, sampled if sampled and sampled["text"] == prompt["text"] else None)
        except REFUSED:
            return ""  # the views say why


def prompt_rule(value) -> None:
    """The prompt store: ``{"text": ..., "task": ..., "seed": ...}``, a drawn prompt's task and seed, or neither."""
    if not isinstance(value, dict) or set(value) != {"text", "task", "seed"}:
        raise Refused(f'expected {{"text": ..., "task": ..., "seed": ...}}, got {type(value).__name__}')
    if not isinstance(value["text"], str):
        raise Refused("text must be a string")
    text()(value["text"])
    if value["task"] is not None:
        one_of(*prompt_tasks.NAMES)(value["task"])
        integer(0, SEED_LIMIT)(value["seed"])
    elif value["seed"] is not None:
        raise Refused("a seed without a prompt task")


def rules(state) -> dict:
    return {("apply", "n_clicks"): CLICKS, ("draw", "n_clicks"): CLICKS, ("prompt-text", "value"): text(),
            ("task", "value"): one_of(*prompt_tasks.NAMES), ("seed", "value"): scalar(), ("prompt", "data"): prompt_rule}


VIEW = View("prompt", {"top": part}, register, rules)
