"""The wind-tunnel explorer's geometry view: value-manifold's PCA of the residual stream or the attention output
per layer, coloured by Bayes entropy, token position or the task's true latent class (the analysis's own
figures, cached per checkpoint and ablation).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from dash import Input, Output, dcc, no_update

from analyses import belief_state, style, value_manifold

from .common import REFUSED, RADIO, graph, message_figure, panel


FLAT_BITS = 1e-6  # a Bayes entropy varying less than this over the points: no colour to tell them apart


class GeometryViews:
    """The ``Explorer``'s geometry view (a part of the class, see ``interp/explore.py``)."""

    def geometry_view(self, index: int, choices: list[str], stream: str, colour: str = "entropy") -> go.Figure:
        """value-manifold's PCA figure of one stream, coloured by Bayes entropy, by token position
        (``colour="position"``) or by the task's true latent class (``"latent"``), cached per checkpoint and
        ablation; a figure is styled the first time it is shown (value-manifold draws several). An entropy that is
        the same at every point (recall's, 0: the answer is always known) colours nothing: the points are coloured
        by position instead, and the title says why."""
        if stream == "belief":
            return self.belief_view(index, choices)
        key = ("geometry", index, tuple(sorted(choices or [])))
        if key not in self._cache:
            with self.ablated(index, choices) as model, self.waits.on(
                    f"geometry: the PCA of every layer on {self.n_geometry} sequences"):
                result = value_manifold.measure(model, n=self.n_geometry, seed=self.seed, max_points=1500,
                                                readout=False)
                self._cache[key] = (result.figures, set(), result.metrics)
        figures, styled, metrics = self._cache[key]
        name = f"{stream.replace('_', '-')}-pca"
        constant = metrics.get("entropy_std_bits", 1.0) < FLAT_BITS  # (recall: every query's answer is known)
        if colour == "latent" and self.task.query_latent is not None:
            name += f"-by-{self.task.query_latent}"
        elif (colour == "position" or colour == "entropy" and constant) and f"{name}-by-position" in figures:
            name += "-by-position"
        if name not in figures:
            return message_figure("this model has no attention output to look at; see the residual stream")
        if name not in styled:
            style.apply(figures[name], subject=self.task.name)  # as the analysis's own run would
            figures[name].update_layout(width=None, height=460, margin=dict(t=80))  # the page's size, not a PDF's
            if constant and name.endswith("-by-position"):  # said where it shows, and why
                title = figures[name].layout.title.text
                figures[name].update_layout(title_text=title.replace("</sup>", "") + (
                    "; " if "<sup>" in title else "<br><sup>") + f"the Bayes entropy is "
                    f"{metrics['entropy_mean_bits']:.3g} bits at every point here, nothing to colour by</sup>")
            styled.add(name)
        return figures[name]  # cached as shown: views never change a figure they return

    def flat_entropy(self, index: int, choices: list[str]) -> bool:
        """Whether the Bayes entropy is the same at every point of the geometry (known once it is computed)."""
        cached = self._cache.get(("geometry", index, tuple(sorted(choices or []))))
        return cached is not None and cached[2].get("entropy_std_bits", 1.0) < FLAT_BITS

    def belief_view(self, index: int, choices: list[str]) -> go.Figure:
        """belief-state's simplex by layer: the exact belief over the hidden states beside each layer's held-out
        linear read-out of it (a task that gives a belief beside its answers: the processes), cached like the PCA."""
        key = ("belief", index, tuple(sorted(choices or [])))
        if key not in self._cache:
            with self.ablated(index, choices) as model, self.waits.on(
                    f"belief: the read-out of every layer on {self.n_geometry} sequences"):
                figure = belief_state.compute(model, n=self.n_geometry, seed=self.seed).figures["simplex-by-layer"]
            style.apply(figure, subject=self.task.name)
            figure.update_layout(width=None, margin=dict(t=110))  # the page's width, not a PDF's
            self._cache[key] = figure
        return self._cache[key]




def colour_options(task, flat: bool = False) -> list[dict]:
    """The colour choices; ``flat``: the Bayes entropy colours nothing (the same everywhere), so it is not offered."""
    entropy = ("coloured by Bayes entropy (the same at every point: nothing to colour by)" if flat else
               "coloured by Bayes entropy")
    return [{"label": entropy, "value": "entropy", "disabled": flat}, {"label": "by token position", "value": "position"}
            ] + ([{"label": f"by the true {task.query_latent}", "value": "latent"}] if task.query_latent else [])


def geometry_panel(explorer, info: dict):
    """The stream and the colour to show, and the figure (a row of three layers' PCAs at a time)."""
    return panel("geometry", dcc.RadioItems(id="stream", inline=True, value="residual", inputStyle=RADIO,
                                            options=[{"label": "residual stream", "value": "residual"}] + (
                                                [{"label": "attention output (value vectors)", "value": "attention_out"}]
                                                if info["attention_out"] else []) + (
                                                [{"label": f"belief over the {explorer.task.belief_over} by layer",
                                                  "value": "belief"}] if getattr(explorer.task, "belief_over", None)
                                                else [])),
                 dcc.RadioItems(id="colour", inline=True, value="entropy", inputStyle=RADIO,
                                options=colour_options(explorer.task)),
                 graph("geometry", 140 + 330 * math.ceil(info["n_layers"] / 3)))


def register(app, explorer, ablations, chosen_ablations) -> None:
    @app.callback(Output("geometry", "figure"), Output("colour", "value"), Output("colour", "options"),
                  Input("step", "value"), *ablations, Input("stream", "value"), Input("colour", "value"))
    def geometry(index, heads, blocks, mode, stream, colour):
        """The figure; where the Bayes entropy is the same at every point the colour choice says so and shows
        "by token position", which is what the figure is coloured by."""
        try:
            choices = chosen_ablations(heads, blocks, mode)
            fig = explorer.geometry_view(index, choices, stream, colour)
        except REFUSED as err:
            return message_figure(str(err)), no_update, no_update
        flat = stream != "belief" and explorer.flat_entropy(index, choices)
        return fig, "position" if flat and colour == "entropy" else no_update, colour_options(explorer.task, flat)
