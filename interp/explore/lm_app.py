"""The explorer on a language model (``interp explore --model MODEL``), its views: a local Dash app on typed prompts
(``interp/explore_lm.py`` serves it, and answers while the model opens).

- prompt: typed text, or a prompt of a prompt task (two-label, coin) drawn with a seed, whose exact Bayes
  predictive over the answer tokens is shown beside the model's (both from ``analyses.activations``);
- attention of one layer and query head, tokens' text on both axes, and a grid of every head of the layer;
- logit lens: each layer's residual stream at a chosen position decoded through the model's own final norm
  and unembedding, its top tokens and their probabilities (the last layer's is the model's own output);
- activation patching on drawn prompts of a prompt task, one shown observation flipped (the wind-tunnel
  explorer's panel, ``interp/explore_patching.py``, with ``LanguagePairs``).

The wind-tunnel explorer (``interp/explore.py``) is the same idea on a model whose task gives an exact
posterior at every position; a language model has one only at a prompt task's answer position.
"""
from __future__ import annotations


import plotly.graph_objects as go
import torch
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from analyses import activations
from models.base import act_name
from tasks.base import SEED_LIMIT, SEED_RANGE, is_seed
from tasks import prompts as prompt_tasks

from . import attention as explore_attention, patching as explore_patching
from ..errors import UserError
from .common import INLINE, REFUSED, click_rule, graph, message_figure, panel, radios, sized_graph, styled_page
from .jobs import TakingTurns
from .lens import top_tokens_figure, top_tokens_height
from ..requests import MAX_CLICKS, Refused, guard, integer, one_of, scalar, text
from ..waits import Waits, register_status, status_line

MAX_TOKENS = 256  # a typed prompt's length limit: the views draw T x T patterns for every head
TOP = 8  # tokens shown per layer in the logit lens


def token_text(piece: str) -> str:
    """A token's text as an axis label: spaces and line breaks made visible."""
    return piece.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


class LanguageExplorer:
    """Views of one language model (``models.language_model.LanguageModel``) on one prompt at a time."""

    def __init__(self, lm):
        if lm.tokenizer is None:
            raise UserError(f"{lm.name} has no tokenizer: the explorer shows prompts as text")
        # views and a background job (patching) take turns on the model: a view waits at most one of the job's steps
        self.lm, self.lock, self._cache = lm, TakingTurns(), {}
        self.waits = Waits()  # what a slow view is waiting on, said in the page and on the terminal

    def encode(self, text: str) -> list[int]:
        ids = self.lm.tokenizer.encode(text, add_special_tokens=False)
        if not ids:
            raise UserError("the prompt is empty: type some text")
        if len(ids) > min(MAX_TOKENS, self.lm.model.cfg.n_ctx):
            raise UserError(f"the prompt is {len(ids)} tokens; the explorer shows at most "
                            f"{min(MAX_TOKENS, self.lm.model.cfg.n_ctx)}")
        return ids

    def labels(self, ids: list[int]) -> list[str]:
        """One axis label per position, unique (a category axis would merge repeated tokens)."""
        return [f"{token_text(self.lm.tokenizer.decode([t]))} ·{i}" for i, t in enumerate(ids)]

    @torch.no_grad()
    def run(self, ids: list[int]) -> dict:
        key = tuple(ids)
        if key not in self._cache:
            model = self.lm.model
            names = [act_name(kind, l) for l in range(model.cfg.n_layers) for kind in ("pattern", "resid_post")]
            with self.lock, self.waits.on(f"{self.lm.name} on the {len(ids)} tokens of the prompt"):
                logits, cache = model.run_with_cache(torch.tensor([ids], device=activations.device_of(self.lm)),
                                                     names_filter=lambda name: name in names)
            self._cache = {key: dict(logits=logits[0].cpu(), cache={n: cache[n][0].cpu() for n in names})}
        return self._cache[key]

    def sample(self, task: str, seed: int) -> dict:
        """A prompt of prompt task ``task`` (one per number of shown examples, the seed picks one), with the
        exact Bayes predictive over its answer tokens."""
        if not is_seed(seed):
            raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
        prompt_set = activations.prompt_set(self.lm, task, "mixed", 1, 0.9, seed)
        prompt = prompt_set.prompts[seed % len(prompt_set.prompts)]
        return dict(text=self.lm.tokenizer.decode(prompt.tokens), answers=list(prompt_set.answers),
                    bayes=prompt.bayes.tolist(), task=task)

    def answer_summary(self, ids: list[int], sampled: dict | None) -> str:
        """The model's answer over a sampled prompt's answer tokens beside the Bayes predictive."""
        if not sampled:
            return ""
        logits = self.run(ids)["logits"][-1]
        model = torch.softmax(logits[sampled["answers"]].double(), -1).tolist()
        names = [self.lm.tokenizer.decode([a]).strip() for a in sampled["answers"]]
        mass = torch.softmax(logits.double(), -1)[sampled["answers"]].sum().item()
        return (f"{sampled['task']} prompt: Bayes predictive " + ", ".join(f"{n} {p:.3f}" for n, p in zip(names, sampled["bayes"]))
                + "; model (renormalised over the answers) " + ", ".join(f"{n} {p:.3f}" for n, p in zip(names, model))
                + f"; the model puts {mass:.1%} of its next-token probability on the answers")

    def check_place(self, layer, head=0) -> None:
        cfg = self.lm.model.cfg
        if not (isinstance(layer, int) and 0 <= layer < cfg.n_layers and isinstance(head, int) and 0 <= head < cfg.n_heads):
            raise UserError(f"layer {layer!r}, head {head!r} out of range: {self.lm.name} has {cfg.n_layers} layers "
                            f"of {cfg.n_heads} query heads")

    def attention_view(self, ids: list[int], layer: int, head: int, log: bool = False) -> go.Figure:
        """One query head's pattern, every token's text on both axes (``explore_attention.pattern_figure``)."""
        self.check_place(layer, head)
        pattern = self.run(ids)["cache"][act_name("pattern", layer)][head]
        group = self.lm.model.cfg.n_heads // (getattr(self.lm.model.cfg, "n_key_value_heads", None)
                                              or self.lm.model.cfg.n_heads)
        shared = f" (key/value head {head // group})" if group > 1 else ""
        return explore_attention.pattern_figure(pattern, self.labels(ids), f"{self.lm.name}: attention, layer "
                                                f"{layer} query head {head}{shared}", log)

    def grid_view(self, ids: list[int], layer: int, log: bool = False, head: int | None = None) -> go.Figure:
        """Every query head of ``layer`` side by side (``explore_attention.heads_figure``), ``head`` framed."""
        self.check_place(layer)
        patterns = self.run(ids)["cache"][act_name("pattern", layer)]
        return explore_attention.heads_figure(patterns, self.labels(ids), f"{self.lm.name}: every query head of "
                                              f"layer {layer} (click one to see it named token by token)", log,
                                              chosen=head)

    @torch.no_grad()
    def lens_view(self, ids: list[int], position: int | None = None) -> go.Figure:
        """Per layer, the top tokens of the residual stream at ``position`` (default: the last) decoded through
        the final norm and unembedding."""
        model = self.lm.model
        position = len(ids) - 1 if position is None else position
        if not isinstance(position, int) or not 0 <= position < len(ids):
            raise UserError(f"position {position!r} out of range: the prompt has {len(ids)} tokens")
        cache = self.run(ids)["cache"]
        resid = torch.stack([cache[act_name("resid_post", l)][position] for l in range(model.cfg.n_layers)])
        device = activations.device_of(self.lm)
        probs = torch.softmax(model.unembed(model.ln_final(resid[None].to(device)))[0].double(), -1).cpu()
        top = probs.topk(TOP, -1)
        text = [[token_text(self.lm.tokenizer.decode([t])) for t in row] for row in top.indices.tolist()]
        return top_tokens_figure(top.values, text, f"{self.lm.name}: logit lens at position "
                                 f"{self.labels(ids)[position]}, the top {TOP} next tokens per layer")


def build_app(explorer: LanguageExplorer, initial: str = "The capital of France is") -> Dash:
    cfg = explorer.lm.model.cfg
    app = Dash(__name__, title=f"interp explore: {explorer.lm.name}")
    styled_page(app)
    inline = INLINE
    patching = explore_patching.LanguagePairs(explorer)  # the patching panel's pairs: drawn prompts, one flipped
    app.layout = html.Div([
        *status_line(),  # what a slow view is waiting on
        html.H2(f"{explorer.lm.name}: {cfg.n_layers} layers, {cfg.n_heads} query heads "
                f"({getattr(cfg, 'n_key_value_heads', None) or cfg.n_heads} key/value heads), d_model {cfg.d_model}",
                style=dict(margin="4px 6px")),
        dcc.Store(id="prompt", data=dict(text=initial, task=None, seed=None)),
        panel("prompt",
              dcc.Textarea(id="prompt-text", value=initial, style=dict(width="100%", height="60px", fontFamily="monospace")),
              html.Div([html.Button("apply", id="apply", n_clicks=0, style=inline),
                        html.Span("or draw a prompt of ", style=dict(marginRight="4px")),
                        dcc.Dropdown(id="task", options=list(prompt_tasks.NAMES), value="two-label", clearable=False,
                                     style=dict(width="160px", display="inline-block", verticalAlign="middle")),
                        html.Label(" seed ", style=dict(marginLeft="8px")),
                        dcc.Input(id="seed", type="number", value=0, min=0, step=1, style=dict(width="80px")),
                        html.Button("draw", id="draw", n_clicks=0, style=dict(marginLeft="6px")),
                        html.Span(id="message", style=dict(color="#b00", marginLeft="12px"))]),
              html.Div(id="answer", style=dict(marginTop="6px", fontSize="13px")), minWidth="0"),
        panel("layer and head", radios("layer", cfg.n_layers, "layer", marginTop="4px"),
              radios("head", cfg.n_heads, "query head", marginTop="4px"),
              html.Div([html.Label("colour "), dcc.RadioItems(
                  id="scale", options=[{"label": "linear", "value": "linear"}, {"label": "log", "value": "log"}],
                  value="linear", inline=True, inputStyle=dict(marginLeft="6px", marginRight="2px"))],
                  style=dict(marginTop="4px")), minWidth="0"),
        html.Div([panel("attention", html.Div(sized_graph("attention"), style=dict(overflow="auto", maxHeight=explore_attention.BOX)), minWidth="0"),
                  panel("logit lens", graph("lens", top_tokens_height(cfg.n_layers)), minWidth="0")],
                 style=dict(display="grid", gridTemplateColumns="minmax(0, 3fr) minmax(0, 2fr)", alignItems="start")),
        panel("every head of the layer", sized_graph("grid"), minWidth="0"),
        explore_patching.panel(patching),
    ], style=dict(fontFamily="sans-serif", fontSize="14px"))

    @app.callback(Output("prompt", "data"), Output("prompt-text", "value"), Output("message", "children"),
                  Input("apply", "n_clicks"), Input("draw", "n_clicks"), State("prompt-text", "value"),
                  State("task", "value"), State("seed", "value"), prevent_initial_call=True)
    def choose(_apply, _draw, typed, task, seed):
        try:
            if ctx.triggered_id == "draw":
                sampled = explorer.sample(task, seed or 0)
                return dict(text=sampled["text"], task=task, seed=seed or 0), sampled["text"], ""
            explorer.encode(typed or "")
            return dict(text=typed, task=None, seed=None), no_update, ""
        except REFUSED as err:
            return no_update, no_update, str(err)

    @app.callback(Output("attention", "figure"), Output("grid", "figure"), Output("lens", "figure"),
                  Output("answer", "children"), Input("prompt", "data"), Input("layer", "value"), Input("head", "value"),
                  Input("scale", "value"))
    def views(prompt, layer, head, scale):
        try:
            ids = explorer.encode(prompt["text"])
            sampled = explorer.sample(prompt["task"], prompt["seed"]) if prompt["task"] else None
            log = scale == "log"
            return (explorer.attention_view(ids, layer, head, log), explorer.grid_view(ids, layer, log, head),
                    explorer.lens_view(ids),
                    explorer.answer_summary(ids, sampled if sampled and sampled["text"] == prompt["text"] else None))
        except REFUSED as err:
            message = message_figure(str(err))
            return message, message, message, ""

    @app.callback(Output("head", "value"), Input("grid", "clickData"), prevent_initial_call=True)
    def pick_head(click):  # a click on one head of the grid shows it named token by token
        return click["points"][0]["curveNumber"] if click else no_update

    register_status(app, explorer.waits)

    explore_patching.register(app, patching)
    # every request checked before a view runs (interp/requests.py)
    guard(app, rules(explorer) | explore_patching.rules(patching))
    return app


def rules(explorer: LanguageExplorer) -> dict:
    """The rule of every control of the language-model explorer (see ``interp/requests.py``)."""
    cfg = explorer.lm.model.cfg
    clicks = integer(0, MAX_CLICKS, optional=True)

    def prompt_rule(value):
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

    return {("apply", "n_clicks"): clicks, ("draw", "n_clicks"): clicks, ("prompt-text", "value"): text(),
            ("task", "value"): one_of(*prompt_tasks.NAMES), ("seed", "value"): scalar(),
            ("layer", "value"): integer(0, cfg.n_layers), ("head", "value"): integer(0, cfg.n_heads),
            ("prompt", "data"): prompt_rule, ("scale", "value"): one_of("linear", "log"), ("tick", "n_intervals"): clicks,
            ("grid", "clickData"): click_rule("the grid of heads", cfg.n_heads, named=False)}
