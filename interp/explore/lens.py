"""The wind-tunnel explorer's logit lens: at every query position, KL(Bayes || the answer distribution decoded from
each layer's residual stream through the model's own readout) (``logit_lens.lens_probs``, computed with the
sequence's other numbers, ``computed.sequence_numbers``), in the held-out calibration panel ("this sequence").
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output

from analyses import logit_lens

from .common import REFUSED, graph, message_figure, page_figure
from .computed import sequence_numbers
from .hooks import CONTROLS, ablation_text, chosen_ablations
from .page import View


def lens_view(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> go.Figure:
    """The lens of one sequence as the model at ``index`` with ``choices`` ablated decodes it."""
    seq = sequence_numbers(state, index, tokens, seed, choices)
    if seq["lens"] is None:
        return page_figure(message_figure("a continuous task: no answer classes to decode each layer into"))
    return page_figure(lens_figure(state, seq["batch"], seq["lens"], tokens, choices))


def lens_figure(state, batch, lens: list[torch.Tensor], tokens: list, choices: list[str] = ()) -> go.Figure:
    """logit-lens on this sequence: KL(Bayes || the answer distribution decoded from each layer), per query."""
    rows = batch.query_mask[0].nonzero().flatten().tolist()
    labels = [state.names(tokens)[i] for i in rows]
    bayes = batch.posterior[0, rows].float()
    classes = state.class_names()
    kl = [logit_lens.compare(p[0, rows], bayes)["kl_bits"].tolist() for p in lens]
    top = [[classes[c] for c in p[0, rows].argmax(-1).tolist()] for p in lens]
    fig = go.Figure(go.Heatmap(z=kl, x=labels, y=[f"layer {l}" for l in range(len(lens))], customdata=top,
                               colorscale="Magma_r", zmin=0, colorbar=dict(title="KL, bits"),
                               hovertemplate="%{y}, position %{x}<br>KL(Bayes || lens) %{z:.4f} bits"
                                             "<br>lens arg-max %{customdata}<extra></extra>"))
    fig.update_layout(title="logit lens: each layer's residual decoded, against Bayes"
                            + (f"<br><sup>model with {ablation_text(choices)}</sup>" if choices else ""),
                      xaxis_title="query position", yaxis=dict(title="layer", autorange="reversed"),
                      width=None, height=200 + 30 * len(lens), margin=dict(t=60, b=40))
    return fig


def lens_graph(state, at):
    """The lens's box: a row per layer."""
    return graph("lens", 200 + 30 * state.info["n_layers"])


def register(app, state) -> None:
    @app.callback(Output("lens", "figure"), Input("step", "value"), Input("sequence", "data"), *CONTROLS)
    def lens(index, sequence, heads, blocks, mode):
        try:
            return lens_view(state, index, sequence["tokens"], sequence["seed"], chosen_ablations(heads, blocks, mode))
        except REFUSED as err:
            return message_figure(str(err))


VIEW = View("lens", {"this sequence": lens_graph}, register)
