"""The language-model explorer's logit lens: at one position (the last), each layer's residual stream decoded through
the model's own final norm and unembedding, its top tokens and their probabilities, the tokens' text written in the
cells (the last layer's is the model's own output).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import Input, Output

from analyses import activations, style
from models.base import act_name

from ..errors import UserError
from .common import REFUSED, graph, message_figure, panel
from .lm_state import token_text
from .page import View

TOP = 8  # tokens shown per layer
CELL_TEXT = 12  # pixels: a lens cell's token, readable (plotly's default shrinks it to fit, to about 6)
ROW_PX = 26  # a layer's row: the token's text and room around it


def top_tokens_height(n_layers: int) -> int:
    """The lens's height in pixels: a readable row per layer."""
    return 160 + ROW_PX * n_layers


def top_tokens_figure(values: torch.Tensor, text: list[list[str]], title: str) -> go.Figure:
    """Per layer (a row), its top tokens' probabilities (``values`` [layer, rank]), each cell naming its token
    (``text``) in ``CELL_TEXT``-pixel text, tokens too long for a cell cut with an ellipsis (the hover has them
    whole)."""
    layers, top = values.shape
    shown = [[t if len(t) <= 10 else t[:9] + "…" for t in row] for row in text]
    fig = go.Figure(go.Heatmap(z=values.numpy(), x=[f"#{r + 1}" for r in range(top)],
                               y=[f"layer {l}" for l in range(layers)], text=shown, customdata=text,
                               texttemplate="%{text}", textfont=dict(size=CELL_TEXT), zmin=0, zmax=1,
                               colorscale="Blues",
                               colorbar=dict(title="probability"),
                               hovertemplate="%{y}, rank %{x}<br>%{customdata}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="rank", yaxis_title="residual stream after", yaxis_autorange="reversed",
                      height=top_tokens_height(layers), font=dict(size=CELL_TEXT))
    return style.apply(fig).update_layout(width=None)  # the panel's width (style sets a PDF's)


@torch.no_grad()
def lens_view(state, ids: list[int], position: int | None = None) -> go.Figure:
    """Per layer, the top tokens of the residual stream at ``position`` (default: the last) decoded through
    the final norm and unembedding."""
    model = state.lm.model
    position = len(ids) - 1 if position is None else position
    if not isinstance(position, int) or not 0 <= position < len(ids):
        raise UserError(f"position {position!r} out of range: the prompt has {len(ids)} tokens")
    cache = state.run(ids)["cache"]
    resid = torch.stack([cache[act_name("resid_post", l)][position] for l in range(model.cfg.n_layers)])
    device = activations.device_of(state.lm)
    probs = torch.softmax(model.unembed(model.ln_final(resid[None].to(device)))[0].double(), -1).cpu()
    top = probs.topk(TOP, -1)
    text = [[token_text(state.lm.tokenizer.decode([t])) for t in row] for row in top.indices.tolist()]
    return top_tokens_figure(top.values, text, f"{state.lm.name}: logit lens at position "
                             f"{state.labels(ids)[position]}, the top {TOP} next tokens per layer")


def lens_panel(state, at):
    return panel("logit lens", graph("lens", top_tokens_height(state.lm.model.cfg.n_layers)), minWidth="0")


def register(app, state) -> None:
    @app.callback(Output("lens", "figure"), Input("prompt", "data"))
    def lens(prompt):
        try:
            return lens_view(state, state.encode(prompt["text"]))
        except REFUSED as err:
            return message_figure(str(err))


VIEW = View("lens", {"pair": lens_panel}, register)
