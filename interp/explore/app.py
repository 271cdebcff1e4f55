"""The interactive explorer behind ``interp explore --ckpt RUN``: a local Dash app on one model.

Every view is computed by the analyses' own functions and drawn with their figures where they have one; each
view is a file, and ``VIEWS`` is their table, from which the page, its routes and their request rules are built
(``page``). Every view receives the explorer's state (``state.Explorer``: the checkpoints, the models, the task's
sequences, the lock and the cache):

- ``sequence``: a held-out sequence sampled with a seed, or tokens typed by hand, and a step slider over the
  checkpoints of a run folder;
- ``numbers``: the download, and the Python and the ``interp explore --numbers`` command that give the view's
  numbers;
- ``ablation``: heads zeroed or set to their mean, blocks skipped, applied to every view at once (``hooks``);
  head-ablation's map, whose cells ablate their head when clicked;
- ``posterior``: per query position the model's answer distribution beside the Bayes posterior, model vs Bayes
  entropy with the gap, calibration on held-out sequences, intact and as ablated, the task's latent truth;
- ``lens``: KL from Bayes of each layer's decoded residual;
- ``attention``: one layer and head's pattern, every token named on both axes, hypotheses marked, and every head
  of the layer side by side; shown only where the model has attention (or a selective scan);
- ``geometry``: residual-stream and attention-output PCA per layer, or a process's belief by layer;
- ``patching``: activation patching on the sequence shown, a background job with progress and a cancel;
- ``status``: what a slow view waits for, in the page (and on the terminal).

What two views share is a function in one module (``common``, ``hooks``, ``computed``, ``attention_maps``), never
another view's. The server prepares the model and the first views in the background (``prepare_in_background``)
and stops at once on Ctrl-C.
"""
from __future__ import annotations

import json
import logging
import signal
import threading

import click
from dash import Dash, html

from tasks.base import SEED_RANGE, is_seed

from ..errors import UserError
from ..ports import check_port
from . import ablation, attention, geometry, lens, numbers, page, patching, posterior, sequence, status
from .common import REFUSED
from .pairs import WindTunnelPairs
from .server import stop_at_once
from .state import Explorer

VIEWS = (status.VIEW, sequence.VIEW, numbers.VIEW, ablation.VIEW, posterior.VIEW, lens.VIEW, attention.VIEW,
         geometry.VIEW, patching.view(WindTunnelPairs))


def skeleton(state: Explorer, at) -> html.Div:
    """The page: the status line and the sequence on top, the ablation controls on the left ("side"), the views on
    the right ("main")."""
    return html.Div([
        html.H2(f"{state.source.name}: {state.task!r}, {state.info['arch']}", style=dict(margin="4px 6px")),
        *at("status"), *at("top"),
        html.Div([*at("side"), html.Div(at("main"), style=dict(minWidth="0"))],
                 style=dict(display="grid", gridTemplateColumns="250px minmax(0, 1fr)", alignItems="start")),
    ], style=dict(fontFamily="sans-serif", fontSize="14px"))


def build_app(state: Explorer) -> Dash:
    """The Dash app: controls on top and left, views on the right; every view follows every control."""
    return page.build(state, VIEWS, skeleton, f"interp explore: {state.source.name}")


def print_numbers(source, seed: int | None, tokens: str | None, ablate: str | None) -> None:
    """``interp explore --numbers``: one view's numbers as JSON on stdout, the same the page's download holds
    (the last checkpoint of a run folder; the sequence of ``seed`` or the typed ``tokens``; ``ablate`` the
    ablations as the page names them, comma-separated)."""
    if (seed is None) == (tokens is None):
        raise UserError("--numbers needs the sequence: --seed N (a held-out sequence) or --tokens '...', one of them")
    if seed is not None and not is_seed(seed):
        raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
    state = Explorer(source)
    ids = state.sample(seed) if seed is not None else state.typed(tokens)
    choices = [c.strip() for c in (ablate or "").split(",") if c.strip()]
    click.echo(json.dumps(numbers.numbers(state, state.last, ids, seed, choices), indent=1))


def prepare_in_background(state: Explorer) -> threading.Thread:
    """The model's warm-up (a first build of its kernels, about a minute, printing its own progress) and then
    the first sequence's views, in a thread that holds the explorer's lock from before this returns: the
    server answers meanwhile, its views wait for the lock, and the page's status line says what they wait for."""
    index = state.last
    model = state.model(index)
    held = threading.Event()

    def prepare():
        with state.lock:
            held.set()
            warm_up = getattr(model, "warm_up", None)
            if warm_up is not None:
                with state.waits.on(f"preparing the {getattr(model, 'arch', 'model')} model (a first build of its "
                                    f"kernels takes about a minute)", terminal=False):
                    warm_up()
            try:  # what the page asks for first: seed 0, nothing ablated
                tokens = state.sample(0)
                posterior.posterior_views(state, index, tokens, 0, [])
                geometry.geometry_view(state, index, [], "residual")
                if state.info["attention"] or state.info["scan"]:
                    attention.patterns(state, index, tokens, 0, [])
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
    state = Explorer(source)
    app = build_app(state)
    prepare_in_background(state)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the terminal
    click.echo(f"explorer for {source} at http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    app.run(host=host, port=port, debug=False)
