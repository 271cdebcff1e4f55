"""The logit lens in both explorers: each layer's residual stream decoded through the model's own readout.

- wind tunnel (``LensViews.lens_figure``): at every query position, KL(Bayes || the answer distribution decoded
  from each layer) (``logit_lens.lens_probs``, computed with the posterior views);
- language model (``top_tokens_figure``): at one position, each layer's top next tokens and their probabilities,
  the tokens' text written in the cells.
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch

from analyses import logit_lens, style

from .common import ablation_text, graph


class LensViews:
    """The ``Explorer``'s logit lens (a part of the class, see ``interp/explore.py``)."""

    def lens_figure(self, batch, lens: list[torch.Tensor], tokens: list, choices: list[str] = ()) -> go.Figure:
        """logit-lens on this sequence: KL(Bayes || the answer distribution decoded from each layer), per query."""
        rows = batch.query_mask[0].nonzero().flatten().tolist()
        labels = [self.names(tokens)[i] for i in rows]
        bayes = batch.posterior[0, rows].float()
        classes = self.class_names()
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



def lens_graph(n_layers: int):
    """The wind-tunnel lens's box: a row per layer."""
    return graph("lens", 200 + 30 * n_layers)


CELL_TEXT = 12  # pixels: a lens cell's token, readable (plotly's default shrinks it to fit, to about 6)
ROW_PX = 26  # a layer's row: the token's text and room around it


def top_tokens_height(n_layers: int) -> int:
    """The language-model lens's height in pixels: a readable row per layer."""
    return 160 + ROW_PX * n_layers


def top_tokens_figure(values: torch.Tensor, text: list[list[str]], title: str) -> go.Figure:
    """A language model's lens: per layer (a row), its top tokens' probabilities (``values`` [layer, rank]), each
    cell naming its token (``text``) in ``CELL_TEXT``-pixel text, tokens too long for a cell cut with an ellipsis
    (the hover has them whole)."""
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
