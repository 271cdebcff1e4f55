"""The wind-tunnel explorer's geometry view: value-manifold's PCA of the residual stream or the attention output
per layer, coloured by Bayes entropy, token position or the task's true latent class (the analysis's own
figures, cached per checkpoint and ablation); for a task with a belief over hidden states (the processes), that
belief beside each layer's read-out of it (belief-state's simplex).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from dash import Input, Output, dcc, no_update

from analyses import belief_state, style, value_manifold

from ..requests import one_of
from .common import RADIO, REFUSED, graph, message_figure, panel
from .hooks import CONTROLS, ablated, chosen_ablations
from .page import View


FLAT_BITS = 1e-6  # a Bayes entropy varying less than this over the points: no colour to tell them apart


def geometry_view(state, index: int, choices: list[str], stream: str, colour: str = "entropy") -> go.Figure:
    """value-manifold's PCA figure of one stream, coloured by Bayes entropy, by token position
    (``colour="position"``) or by the task's true latent class (``"latent"``), cached per checkpoint and
    ablation; a figure is styled the first time it is shown (value-manifold draws several). An entropy that is
    the same at every point (recall's, 0: the answer is always known) colours nothing: the points are coloured
    by position instead, and the title says why."""
    if stream == "belief":
        return belief_view(state, index, choices)
    key = ("geometry", index, tuple(sorted(choices or [])))
    if key not in state.cache:
        with ablated(state, index, choices) as model, state.waits.on(
                f"geometry: the PCA of every layer on {state.n_geometry} sequences"):
            result = value_manifold.measure(model, n=state.n_geometry, seed=state.seed, max_points=1500,
                                            readout=False)
            state.cache[key] = (result.figures, set(), result.metrics)
    figures, styled, metrics = state.cache[key]
    name = f"{stream.replace('_', '-')}-pca"
    constant = metrics.get("entropy_std_bits", 1.0) < FLAT_BITS  # (recall: every query's answer is known)
    if colour == "latent" and state.task.query_latent is not None:
        name += f"-by-{state.task.query_latent}"
    elif (colour == "position" or colour == "entropy" and constant) and f"{name}-by-position" in figures:
        name += "-by-position"
    if name not in figures:
        return message_figure("this model has no attention output to look at; see the residual stream")
    if name not in styled:
        style.apply(figures[name], subject=state.task.name)  # as the analysis's own run would
        figures[name].update_layout(width=None, height=460, margin=dict(t=80))  # the page's size, not a PDF's
        if constant and name.endswith("-by-position"):  # said where it shows, and why
            title = figures[name].layout.title.text
            figures[name].update_layout(title_text=title.replace("</sup>", "") + (
                "; " if "<sup>" in title else "<br><sup>") + f"the Bayes entropy is "
                f"{metrics['entropy_mean_bits']:.3g} bits at every point here, nothing to colour by</sup>")
        styled.add(name)
    return figures[name]  # cached as shown: views never change a figure they return


def flat_entropy(state, index: int, choices: list[str]) -> bool:
    """Whether the Bayes entropy is the same at every point of the geometry (known once it is computed)."""
    cached = state.cache.get(("geometry", index, tuple(sorted(choices or []))))
    return cached is not None and cached[2].get("entropy_std_bits", 1.0) < FLAT_BITS


def belief_view(state, index: int, choices: list[str]) -> go.Figure:
    """belief-state's simplex by layer: the exact belief over the hidden states beside each layer's held-out
    linear read-out of it (a task that gives a belief beside its answers: the processes), cached like the PCA."""
    key = ("belief", index, tuple(sorted(choices or [])))
    if key not in state.cache:
        with ablated(state, index, choices) as model, state.waits.on(
                f"belief: the read-out of every layer on {state.n_geometry} sequences"):
            figure = belief_state.compute(model, n=state.n_geometry, seed=state.seed).figures["simplex-by-layer"]
        style.apply(figure, subject=state.task.name)
        figure.update_layout(width=None, margin=dict(t=110))  # the page's width, not a PDF's
        state.cache[key] = figure
    return state.cache[key]


def colour_options(task, flat: bool = False) -> list[dict]:
    """The colour choices; ``flat``: the Bayes entropy colours nothing (the same everywhere), so it is not offered."""
    entropy = ("coloured by Bayes entropy (the same at every point: nothing to colour by)" if flat else
               "coloured by Bayes entropy")
    return [{"label": entropy, "value": "entropy", "disabled": flat}, {"label": "by token position", "value": "position"}
            ] + ([{"label": f"by the true {task.query_latent}", "value": "latent"}] if task.query_latent else [])


def streams(state) -> list[tuple[str, str]]:
    """The streams the page's model has to show: (value, label)."""
    belief = getattr(state.task, "belief_over", None)
    return ([("residual", "residual stream")] + ([("attention_out", "attention output (value vectors)")]
                                                 if state.info["attention_out"] else [])
            + ([("belief", f"belief over the {belief} by layer")] if belief else []))


def geometry_panel(state, at):
    """The stream and the colour to show, and the figure (a row of three layers' PCAs at a time)."""
    return panel("geometry", dcc.RadioItems(id="stream", inline=True, value="residual", inputStyle=RADIO,
                                            options=[{"label": label, "value": value} for value, label in streams(state)]),
                 dcc.RadioItems(id="colour", inline=True, value="entropy", inputStyle=RADIO,
                                options=colour_options(state.task)),
                 graph("geometry", 140 + 330 * math.ceil(state.info["n_layers"] / 3)))


def register(app, state) -> None:
    @app.callback(Output("geometry", "figure"), Output("colour", "value"), Output("colour", "options"),
                  Input("step", "value"), *CONTROLS, Input("stream", "value"), Input("colour", "value"))
    def geometry(index, heads, blocks, mode, stream, colour):
        """The figure; where the Bayes entropy is the same at every point the colour choice says so and shows
        "by token position", which is what the figure is coloured by."""
        try:
            choices = chosen_ablations(heads, blocks, mode)
            fig = geometry_view(state, index, choices, stream, colour)
        except REFUSED as err:
            return message_figure(str(err)), no_update, no_update
        flat = stream != "belief" and flat_entropy(state, index, choices)
        return fig, "position" if flat and colour == "entropy" else no_update, colour_options(state.task, flat)


def rules(state) -> dict:
    return {("stream", "value"): one_of("residual", "attention_out", "belief"),
            ("colour", "value"): one_of("entropy", "position", "latent")}


VIEW = View("geometry", {"main": geometry_panel}, register, rules)
