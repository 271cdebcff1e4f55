"""Attention figures both explorers draw (``interp/explore.py`` on a wind tunnel, ``interp/explore_lm.py`` on a
language model), in the way of circuitsvis's attention views:

- ``pattern_figure``: one head's pattern with every token named on both axes (no tick is skipped: the figure
  grows with the sequence, ``PX_PER_TOKEN`` pixels a token, and the page scrolls);
- ``heads_figure``: every head of a layer side by side, one small map each, hover naming both tokens; a click
  on a head's map picks it for ``pattern_figure``;
- either on a linear or a log colour scale (``log``): plotly has no log colour scale, so the colour is
  log10 of the weight (floored at ``LOG_FLOOR``), the colour bar labelled in powers of ten and the hover
  giving the weight itself.

Numbers are plain or powers of ten (``style.plain_numbers``), never SI prefixes.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analyses import style

PX_PER_TOKEN = 13  # a tick label's row: 9-pixel text and its spacing
TICK_FONT = 9
LOG_FLOOR = 1e-6  # the smallest weight the log scale tells apart from 0
CELL = 230  # pixels per head in the grid of a layer's heads


def colour(pattern: torch.Tensor, log: bool) -> tuple[list, dict]:
    """What a heat map colours (the weight, or log10 of it) and its colour range and bar."""
    if not log:
        return pattern.tolist(), dict(zmin=0, zmax=1, colorbar=dict(title="weight"))
    low = int(math.log10(LOG_FLOOR))
    ticks = list(range(low, 1))
    return (pattern.double().clamp_min(LOG_FLOOR).log10().tolist(),
            dict(zmin=low, zmax=0, colorbar=dict(title="weight (log)", tickvals=ticks,
                                                 ticktext=[style.number_text(10.0 ** t) for t in ticks])))


def weight_hover(pattern: torch.Tensor, log: bool, head: str = "") -> dict:
    """The hover of a pattern's cell: both tokens by name and the weight (on a log scale the colour is log10 of
    it, so the weight itself rides along as customdata); the labels are the axes' own, sent once."""
    weight = "%{customdata:.4g}" if log else "%{z:.4f}"
    hover = dict(hovertemplate=(f"{head}<br>" if head else "") + f"query %{{y}}<br>key %{{x}}<br>weight {weight}"
                                                                 "<extra></extra>")
    if log:
        hover["customdata"] = pattern.tolist()
    return hover


def size_of(n_tokens: int) -> int:
    """The side of the square plot area that names every one of ``n_tokens`` tokens."""
    return max(360, PX_PER_TOKEN * n_tokens)


def pattern_figure(pattern: torch.Tensor, labels: list[str], title: str, log: bool = False) -> go.Figure:
    """One head's [query, key] pattern; every label on both axes; the figure's width and height are set
    (``size_of``) so that none is skipped."""
    z, scale = colour(pattern, log)
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="Viridis", **scale, **weight_hover(pattern, log)))
    every = dict(tickmode="array", tickvals=labels, ticktext=labels, tickfont=dict(size=TICK_FONT), automargin=True)
    side = size_of(len(labels))
    fig.update_layout(title=title, xaxis=dict(title="key position", tickangle=-90, constrain="domain", **every),
                      yaxis=dict(title="query position", autorange="reversed", scaleanchor="x", constrain="domain",
                                 **every),  # square cells
                      width=side + 330, height=side + 250, margin=dict(t=70, l=60, r=40, b=60))
    return style.plain_numbers(style.use_template(fig))


def heads_figure(patterns: torch.Tensor, labels: list[str], title: str, log: bool = False,
                 names: list[str] | None = None) -> go.Figure:
    """Every head's pattern ([head, query, key]) in a grid, one colour scale; ``names`` titles each head
    ("head 3" by default). A click names the head by its curveNumber."""
    n = patterns.shape[0]
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    names = names or [f"head {h}" for h in range(n)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.03,
                        vertical_spacing=0.12 / rows)
    _, scale = colour(patterns[:1], log)
    for h in range(n):
        z, _ = colour(patterns[h], log)
        fig.add_heatmap(z=z, x=labels, y=labels, coloraxis="coloraxis", **weight_hover(patterns[h], log, names[h]),
                        row=h // cols + 1, col=h % cols + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", cmin=scale["zmin"], cmax=scale["zmax"],
                                                  colorbar=scale["colorbar"]),
                      width=None, height=90 + CELL * rows, margin=dict(t=80, l=20, r=20, b=20))
    return style.plain_numbers(style.use_template(fig))
