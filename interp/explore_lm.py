"""The explorer on a language model (``interp explore --model MODEL``): a local Dash app on typed prompts.

- prompt: typed text, or a prompt of a prompt task (two-label, coin) drawn with a seed, whose exact Bayes
  predictive over the answer tokens is shown beside the model's (both from ``analyses._prompted``);
- attention of one layer and query head, tokens' text on both axes, and a grid of every head of the layer;
- logit lens: each layer's residual stream at a chosen position decoded through the model's own final norm
  and unembedding, its top tokens and their probabilities (the last layer's is the model's own output).

The wind-tunnel explorer (``interp/explore.py``) is the same idea on a model whose task gives an exact
posterior at every position; a language model has one only at a prompt task's answer position.
"""
from __future__ import annotations

import logging
import math
import threading

import click
import plotly.graph_objects as go
import torch
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from plotly.subplots import make_subplots

from analyses import _prompted, style
from analyses.base import AnalysisError
from models.base import act_name
from tasks import ConfigError
from tasks.base import SEED_LIMIT, SEED_RANGE, is_seed
from tasks import prompts as prompt_tasks

from .errors import UserError
from .requests import MAX_CLICKS, Refused, guard, integer, one_of, scalar, text

MAX_TOKENS = 256  # a typed prompt's length limit: the views draw T x T patterns for every head
TOP = 8  # tokens shown per layer in the logit lens
REFUSED = (UserError, AnalysisError, ConfigError)


def token_text(piece: str) -> str:
    """A token's text as an axis label: spaces and line breaks made visible."""
    return piece.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


class LanguageExplorer:
    """Views of one language model (``models.language_model.LanguageModel``) on one prompt at a time."""

    def __init__(self, lm):
        if lm.tokenizer is None:
            raise UserError(f"{lm.name} has no tokenizer: the explorer shows prompts as text")
        self.lm, self.lock, self._cache = lm, threading.RLock(), {}

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
            with self.lock:
                logits, cache = model.run_with_cache(torch.tensor([ids], device=_prompted.device_of(self.lm)),
                                                     names_filter=lambda name: name in names)
            self._cache = {key: dict(logits=logits[0].cpu(), cache={n: cache[n][0].cpu() for n in names})}
        return self._cache[key]

    def sample(self, task: str, seed: int) -> dict:
        """A prompt of prompt task ``task`` (one per number of shown examples, the seed picks one), with the
        exact Bayes predictive over its answer tokens."""
        if not is_seed(seed):
            raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
        prompt_set = _prompted.prompt_set(self.lm, task, "mixed", 1, 0.9, seed)
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

    def attention_view(self, ids: list[int], layer: int, head: int) -> go.Figure:
        self.check_place(layer, head)
        pattern = self.run(ids)["cache"][act_name("pattern", layer)][head]
        labels = self.labels(ids)
        fig = go.Figure(go.Heatmap(z=pattern.numpy(), x=labels, y=labels, zmin=0, zmax=1, colorscale="Viridis",
                                   colorbar=dict(title="attention"),
                                   hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"))
        group = self.lm.model.cfg.n_heads // (getattr(self.lm.model.cfg, "n_key_value_heads", None)
                                              or self.lm.model.cfg.n_heads)
        shared = f" (key/value head {head // group})" if group > 1 else ""
        fig.update_layout(title=f"{self.lm.name}: attention, layer {layer} query head {head}{shared}",
                          xaxis_title="key position", yaxis_title="query position", yaxis_autorange="reversed",
                          width=700, height=640)
        return style.apply(fig)

    def grid_view(self, ids: list[int], layer: int) -> go.Figure:
        self.check_place(layer)
        patterns = self.run(ids)["cache"][act_name("pattern", layer)]
        n = patterns.shape[0]
        cols = math.ceil(math.sqrt(n))
        rows = math.ceil(n / cols)
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(n)],
                            horizontal_spacing=0.04, vertical_spacing=0.08)
        labels = self.labels(ids)
        for h in range(n):
            fig.add_heatmap(z=patterns[h].numpy(), x=labels, y=labels, zmin=0, zmax=1, coloraxis="coloraxis",
                            hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.3f}}<extra></extra>",
                            row=h // cols + 1, col=h % cols + 1)
        fig.update_xaxes(showticklabels=False, title_text="key")
        fig.update_yaxes(showticklabels=False, autorange="reversed", title_text="query")
        fig.update_layout(title=f"{self.lm.name}: every query head of layer {layer}", coloraxis=dict(
            colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title="attention")), width=760, height=120 + 230 * rows)
        return style.apply(fig)

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
        device = _prompted.device_of(self.lm)
        probs = torch.softmax(model.unembed(model.ln_final(resid[None].to(device)))[0].double(), -1).cpu()
        top = probs.topk(TOP, -1)
        text = [[token_text(self.lm.tokenizer.decode([t])) for t in row] for row in top.indices.tolist()]
        layers = [f"layer {l}" for l in range(model.cfg.n_layers)]
        fig = go.Figure(go.Heatmap(z=top.values.numpy(), x=[f"#{r + 1}" for r in range(TOP)], y=layers, text=text,
                                   texttemplate="%{text}", zmin=0, zmax=1, colorscale="Blues",
                                   colorbar=dict(title="probability"),
                                   hovertemplate="%{y}, rank %{x}<br>%{text}: %{z:.3f}<extra></extra>"))
        label = self.labels(ids)[position]
        fig.update_layout(title=f"{self.lm.name}: logit lens at position {label}, the top {TOP} next tokens per layer",
                          xaxis_title="rank", yaxis_title="residual stream after", yaxis_autorange="reversed",
                          width=760, height=160 + 22 * model.cfg.n_layers)
        return style.apply(fig)


def build_app(explorer: LanguageExplorer, initial: str = "The capital of France is") -> Dash:
    cfg = explorer.lm.model.cfg
    app = Dash(__name__, title=f"interp explore: {explorer.lm.name}")
    inline = dict(display="inline-block", marginRight="12px")
    radios = lambda id_, n, label: html.Div([html.Label(label), dcc.RadioItems(  # noqa: E731
        id=id_, options=[{"label": str(i), "value": i} for i in range(n)], value=0, inline=True,
        inputStyle=dict(marginLeft="6px", marginRight="2px"))], style=dict(marginTop="4px"))
    graph = lambda id_, height: dcc.Loading(dcc.Graph(id=id_, config=dict(displaylogo=False), responsive=True,  # noqa: E731
                                                      style=dict(height=f"{height}px")), type="dot", delay_show=400)
    panel = lambda title, *children: html.Div(  # noqa: E731
        [html.H3(title, style=dict(margin="4px 0")), *children],
        style=dict(border="1px solid #ddd", borderRadius="6px", padding="8px", margin="6px", minWidth="0"))
    app.layout = html.Div([
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
              html.Div(id="answer", style=dict(marginTop="6px", fontSize="13px"))),
        panel("layer and head", radios("layer", cfg.n_layers, "layer"), radios("head", cfg.n_heads, "query head")),
        html.Div([panel("attention", graph("attention", 640)), panel("logit lens", graph("lens", 160 + 22 * cfg.n_layers))],
                 style=dict(display="grid", gridTemplateColumns="1fr 1fr", alignItems="start")),
        panel("every head of the layer", graph("grid", 120 + 230 * math.ceil(cfg.n_heads / math.ceil(math.sqrt(cfg.n_heads))))),
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
                  Output("answer", "children"), Input("prompt", "data"), Input("layer", "value"), Input("head", "value"))
    def views(prompt, layer, head):
        try:
            ids = explorer.encode(prompt["text"])
            sampled = explorer.sample(prompt["task"], prompt["seed"]) if prompt["task"] else None
            return (explorer.attention_view(ids, layer, head), explorer.grid_view(ids, layer), explorer.lens_view(ids),
                    explorer.answer_summary(ids, sampled if sampled and sampled["text"] == prompt["text"] else None))
        except REFUSED as err:
            message = go.Figure().add_annotation(text=str(err), showarrow=False, x=0.5, y=0.5, xref="paper",
                                                 yref="paper")
            return message, message, message, ""

    guard(app, rules(explorer))  # every request checked before a view runs (interp/requests.py)
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
            ("prompt", "data"): prompt_rule}


def serve(spec: str, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Load the language model ``spec`` (anything ``--model`` takes), then serve until interrupted."""
    from models.language_model import open_language_model

    from .ports import check_port

    check_port(host, port)
    explorer = LanguageExplorer(open_language_model(spec))
    app = build_app(explorer)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    click.echo(f"explorer for {spec} at http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    app.run(host=host, port=port, debug=False)
