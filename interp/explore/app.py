"""The interactive explorer behind ``interp explore --ckpt RUN``: a local Dash app on one model.

Every view is computed by the analyses' own functions and drawn with their figures where they
have one; this file only chooses the inputs (a sequence, a checkpoint, a set of ablations) and
lays the views out, each view in its own file:

- sequence: a held-out sequence sampled with a seed (``analyses.base.held_out_batch``), or tokens
  typed by hand, whose exact posterior the task reads back from the tokens
  (``Task.batch_from_tokens``) (here);
- posterior: per query position the model's answer distribution beside the Bayes posterior, and
  model vs Bayes entropy with the gap (``calibration.measure`` and its staircase/error figures), calibration on
  held-out sequences, intact and as ablated, the task's latent truth (``explore_posterior``);
- logit lens: KL from Bayes of each layer's decoded residual (``explore_lens``);
- attention pattern of one layer and head, every token named on both axes (``Task.position_names``),
  keys naming a feasible or an eliminated hypothesis marked (the task's hypothesis tokens, as in
  ``qk_alignment.hypothesis_group``), and every head of the layer side by side, on a linear or log colour
  scale (``explore_attention``); shown only where the model has attention (or a selective scan);
- geometry: residual-stream and attention-output PCA per layer coloured by Bayes entropy, token position
  or the true latent class (``value_manifold``'s own figures), and for a task with a belief over hidden states
  (the processes) that belief beside each layer's read-out (``belief_state``'s simplex) (``explore_geometry``);
- ablation: heads zeroed at ``hook_z`` (``activations.ablation_hook``), blocks skipped
  (``activations.part_hooks``), applied to every view at once; head-ablation's map, whose cells ablate
  their head when clicked (``explore_ablation``);
- activation patching on the sequence shown, a background job with progress and a cancel (``explore_patching``,
  ``explore_jobs``);
- the download, and the Python and the ``interp explore --numbers`` command that give the view's numbers
  (``explore_numbers``);
- a step slider over the checkpoints of a run folder.

The view files share ``explore_common`` (panels, graphs, message figures, click rules); nothing else is
written twice. Slow views say what they wait for in the page and on the terminal (``waits``); the server prepares the
model and the first views in the background (``prepare_in_background``) and stops at once on Ctrl-C.
"""
from __future__ import annotations

import json
import logging
import re
import signal
import threading
from pathlib import Path

import click
import torch
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from analyses.activations import needed_hooks, z_hook_name
from analyses.base import held_out_batch
from models.base import act_name
from tasks import ConfigError
from tasks.base import SEED_RANGE, is_seed

from . import ablation as explore_ablation, attention as explore_attention, geometry as explore_geometry
from . import numbers as explore_numbers, patching as explore_patching, posterior as explore_posterior
from ..checkpoint import list_checkpoints, load, resolve
from ..errors import UserError
from .ablation import AblationViews, ablation_hooks, chosen_ablations  # noqa: F401  (public here)
from .attention import AttentionViews
from .common import REFUSED, panel, styled_page
from .server import children, stop_at_once  # noqa: F401  (public here)
from .geometry import GeometryViews
from .lens import LensViews, lens_graph
from .numbers import NumbersViews
from .posterior import PosteriorViews
from ..ports import check_port
from ..requests import explorer_rules, guard
from ..waits import Waits, register_status, status_line


def parse_tokens(task, text: str) -> list[int]:
    """Token ids from text: token names as the task prints them (``k3 v7``) or plain ids."""
    if task.continuous:
        raise UserError(f"{task.name} feeds real-valued inputs, which cannot be typed as tokens; sample by seed")
    vocab = range(task.vocab_size)
    by_name = {name: i for i, name in zip(vocab, task.token_names(torch.tensor(list(vocab))))}
    ids = []
    for word in re.split(r"[\s,]+", text.strip()):
        if word in by_name:
            ids.append(by_name[word])
        # not "²" or "٣"; and no more digits than a token id has (int() refuses 4,300 digits with a ValueError)
        elif word.isascii() and word.isdigit() and len(word) <= len(str(task.vocab_size)) and int(word) < task.vocab_size:
            ids.append(int(word))
        elif word:
            shown = word if len(word) <= 40 else f"{word[:20]}...({len(word):,} characters)"
            raise UserError(f"unknown token {shown!r}; write names such as {' '.join(examples(by_name))} "
                            f"or ids 0..{task.vocab_size - 1}")
    if not ids:
        raise UserError("type at least one token")
    return ids




def examples(names) -> list[str]:
    """Three token names to suggest: words, not the HMM's table values (0.00, 0.01), where the task has them."""
    def number(name: str) -> bool:
        try:
            float(name)
            return True
        except ValueError:
            return False
    words = [n for n in names if not number(n)]
    return (words or list(names))[:3]


class Explorer(PosteriorViews, LensViews, AttentionViews, GeometryViews, AblationViews, NumbersViews):
    """The models of one checkpoint or run folder and every view of them, as plotly figures.

    Views are computed under one lock: a Dash server answers callbacks on several threads, and
    ablation hooks live on the (shared) model while a view runs. Each view's methods are in its own file, a
    base class here: ``explore_posterior``, ``explore_lens``, ``explore_attention``, ``explore_geometry``,
    ``explore_ablation``, ``explore_numbers``; what this class holds is what they all use (the checkpoints, the
    models, the sequences).
    """

    def __init__(self, source, n_calibration: int = 100, n_geometry: int = 150, seed: int = 1234):
        source = Path(source)
        self.source = source
        self.checkpoints = list_checkpoints(source) if source.is_dir() else []
        if not self.checkpoints:
            self.checkpoints = [(None, resolve(source))]
        self.n_calibration, self.n_geometry, self.seed = n_calibration, n_geometry, seed
        self._models, self._cache = {}, {}
        self.lock = threading.RLock()
        self.waits = Waits()  # what a slow view is waiting on, said in the page and on the terminal
        last = self.model(len(self.checkpoints) - 1)  # fails here, before the server starts, on a bad file
        self.task = last.task
        self.steps = [step if step is not None else last.step for step, _ in self.checkpoints]

    def model(self, index: int):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.checkpoints):
            raise UserError(f"no checkpoint at slider position {index!r}; there are {len(self.checkpoints)}")
        if index not in self._models:
            self._models[index] = load(self.checkpoints[index][1], device="cpu")
        return self._models[index]

    def layout_info(self, index: int) -> dict:
        """What can be ablated and looked at in this model: layers, heads, attention."""
        model = self.model(index)
        n_layers = model.cfg.n_layers
        attention = model.has_attention() and all(
            z_hook_name(l) in model.hook_dict for l in range(n_layers))
        blocks = [l for l in range(n_layers) if all(n in model.hook_dict for n in needed_hooks("block", l))]
        return dict(n_layers=n_layers, n_heads=model.cfg.n_heads if attention else 0, attention=attention,
                    scan=not attention and model.has_patterns(),
                    attention_out=all(act_name("attn_out", l) in model.hook_dict for l in range(n_layers)),
                    blocks=blocks, arch=getattr(model, "arch", type(model).__name__))


    # --- sequences ---------------------------------------------------------------------------
    def typed(self, text: str) -> list[int]:
        """The token ids of a typed sequence, refused (UserError) if the model or the task cannot take it."""
        tokens = parse_tokens(self.task, text)
        model = self.model(len(self.checkpoints) - 1)
        # Only an architecture with a learned position table has a longest input; recurrent ones take any length.
        if model.positions and len(tokens) > model.cfg.n_ctx:
            raise UserError(f"{len(tokens)} tokens is longer than the model's context ({model.cfg.n_ctx})")
        self.batch(tokens, None)  # refuse a sequence the task cannot give a posterior for
        return tokens

    def sample(self, seed: int) -> list:
        return held_out_batch(self.task, 1, seed).tokens[0].tolist()

    def batch(self, tokens: list, seed: int | None):
        """The batch of one sequence: the sampled one (with its true answers) or a typed one."""
        if seed is not None:
            return held_out_batch(self.task, 1, seed)
        try:
            return self.task.batch_from_tokens(torch.tensor([tokens]))
        except ConfigError as err:
            raise UserError(str(err)) from None

    def names(self, tokens) -> list[str]:
        """Position-tagged token names, unique so they can label heat-map axes."""
        tensor = torch.as_tensor(tokens)
        return [f"{i}:{name}" for i, name in enumerate(self.task.position_names(tensor))]

    def class_names(self) -> list[str]:
        offset = self.task.answer_token_offset
        return self.task.token_names(torch.arange(offset, offset + self.task.n_classes))

    # --- views ---------------------------------------------------------------------------------


def page_rules(info: dict) -> dict:
    """The request rules of the attention views' controls, the status line and the head-ablation map (the
    rest are ``requests.explorer_rules``)."""
    from ..requests import MAX_CLICKS, integer

    clicks = integer(0, MAX_CLICKS, optional=True)
    return explore_attention.rules(info) | explore_ablation.rules() | {("tick", "n_intervals"): clicks}


def build_app(explorer: Explorer):
    """The Dash app: controls on top and left, views on the right; every view follows every control."""
    last = len(explorer.checkpoints) - 1
    info = explorer.layout_info(last)
    first = explorer.sample(0)
    app = Dash(__name__, title=f"interp explore: {explorer.source.name}")
    styled_page(app)
    patching = explore_patching.WindTunnelPairs(explorer)  # the panel's pairs: the sequence shown, corrupted
    steps = explorer.steps
    controls = html.Div([
        html.Div([
            html.Label("seed "), dcc.Input(id="seed", type="number", value=0, min=0, step=1, style=dict(width="80px")),
            html.Button("sample", id="sample", n_clicks=0, style=dict(marginLeft="6px")),
            html.Span(" or edit the tokens and ", style=dict(marginLeft="12px")),
            html.Button("apply", id="apply", n_clicks=0),
            html.Span(id="message", style=dict(color="#b00", marginLeft="12px")),
            html.Button("download numbers (JSON)", id="download-button", n_clicks=0, style=dict(float="right")),
            dcc.Download(id="download"),
        ]),
        dcc.Textarea(id="tokens-text", value=" ".join(explorer.task.token_names(torch.tensor(first))),
                     style=dict(width="100%", height="44px", fontFamily="monospace", marginTop="6px")),
        html.Div([html.Label(f"checkpoint ({len(steps)}): "), html.Span(id="step-label")],
                 style=dict(marginTop="6px")),
        html.Div(dcc.Slider(id="step", min=0, max=last, step=None, value=last,
                            marks={i: str(s) for i, s in enumerate(steps)}),
                 style=dict(display="block" if len(steps) > 1 else "none")),
        explore_numbers.code_panel(),
    ])
    views = html.Div([
        explore_posterior.panels(explorer, info, explore_ablation.map_panel(info, explorer.n_calibration, explorer.seed), lens_graph(info["n_layers"])),
        explore_attention.attention_panel(info),
        explore_geometry.geometry_panel(explorer, info),
        explore_patching.panel(patching),
    ], style=dict(minWidth="0"))
    app.layout = html.Div([
        html.H2(f"{explorer.source.name}: {explorer.task!r}, {info['arch']}", style=dict(margin="4px 6px")),
        *status_line(),  # what a slow view is waiting on (held-out calibration, a kernel build)
        dcc.Store(id="sequence", data=dict(tokens=first, seed=0)),
        panel("sequence", controls),
        html.Div([explore_ablation.controls(info), views],
                 style=dict(display="grid", gridTemplateColumns="250px minmax(0, 1fr)", alignItems="start")),
    ], style=dict(fontFamily="sans-serif", fontSize="14px"))

    @app.callback(Output("sequence", "data"), Output("tokens-text", "value"), Output("message", "children"),
                  Input("sample", "n_clicks"), Input("apply", "n_clicks"), State("seed", "value"),
                  State("tokens-text", "value"), prevent_initial_call=True)
    def choose_sequence(_sample, _apply, seed, text):
        try:
            if ctx.triggered_id == "sample":
                seed = seed or 0
                if not is_seed(seed):
                    raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
                tokens = explorer.sample(seed)
                return (dict(tokens=tokens, seed=seed),
                        " ".join(explorer.task.token_names(torch.tensor(tokens))), "")
            tokens = explorer.typed(text or "")
            return dict(tokens=tokens, seed=None), no_update, ""
        except UserError as err:
            return no_update, no_update, str(err)

    ablations = list(explore_ablation.INPUTS)
    explore_posterior.register(app, explorer, ablations, chosen_ablations)
    explore_numbers.register(app, explorer, ablations, chosen_ablations)
    explore_attention.register(app, explorer, info, ablations, chosen_ablations)
    explore_ablation.register(app, explorer)
    explore_geometry.register(app, explorer, ablations, chosen_ablations)
    register_status(app, explorer.waits)
    explore_patching.register(app, patching)
    guard(app, explorer_rules(explorer, info) | explore_patching.rules(patching) | page_rules(info))  # every request checked before a view runs (interp/requests.py)
    return app


def print_numbers(source, seed: int | None, tokens: str | None, ablate: str | None) -> None:
    """``interp explore --numbers``: one view's numbers as JSON on stdout, the same the page's download holds
    (the last checkpoint of a run folder; the sequence of ``seed`` or the typed ``tokens``; ``ablate`` the
    ablations as the page names them, comma-separated)."""
    if (seed is None) == (tokens is None):
        raise UserError("--numbers needs the sequence: --seed N (a held-out sequence) or --tokens '...', one of them")
    if seed is not None and not is_seed(seed):
        raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
    explorer = Explorer(source)
    index = len(explorer.checkpoints) - 1
    ids = explorer.sample(seed) if seed is not None else explorer.typed(tokens)
    choices = [c.strip() for c in (ablate or "").split(",") if c.strip()]
    click.echo(json.dumps(explorer.numbers(index, ids, seed, choices), indent=1))



def prepare_in_background(explorer: Explorer) -> threading.Thread:
    """The model's warm-up (a first build of its kernels, about a minute, printing its own progress) and then
    the first sequence's views, in a thread that holds the explorer's lock from before this returns: the
    server answers meanwhile, its views wait for the lock, and the page's status line says what they wait for."""
    index = len(explorer.checkpoints) - 1
    model = explorer.model(index)
    held = threading.Event()

    def prepare():
        with explorer.lock:
            held.set()
            warm_up = getattr(model, "warm_up", None)
            if warm_up is not None:
                with explorer.waits.on(f"preparing the {getattr(model, 'arch', 'model')} model (a first build of its "
                                       f"kernels takes about a minute)", terminal=False):
                    warm_up()
            try:  # what the page asks for first: seed 0, nothing ablated
                tokens = explorer.sample(0)
                explorer.posterior_views(index, tokens, 0, [])
                explorer.geometry_view(index, [], "residual")
                info = explorer.layout_info(index)
                if info["attention"] or info["scan"]:
                    explorer.patterns(index, tokens, 0, [])
            except REFUSED:
                pass  # the page's own request says why

    thread = threading.Thread(target=prepare, daemon=True)
    thread.start()
    held.wait()
    return thread


def serve(source, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Check the port, load the model(s), then serve until interrupted; a model's warm-up (a first kernel build,
    about a minute) runs while the server is up, said in the page and on the terminal."""
    check_port(host, port)
    signal.signal(signal.SIGINT, stop_at_once)
    explorer = Explorer(source)
    app = build_app(explorer)
    prepare_in_background(explorer)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the terminal
    click.echo(f"explorer for {source} at http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    app.run(host=host, port=port, debug=False)
