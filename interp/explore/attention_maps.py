"""The attention maps both explorers draw (the wind tunnel's ``attention`` view, the language model's
``lm_attention``), in the way of circuitsvis's attention views.

- ``pattern_figure``: one head's pattern with every token named on both axes (no tick is skipped: the figure
  grows with the sequence, ``PX_PER_TOKEN`` pixels a token, in a box at most ``BOX`` tall that scrolls); a
  sequence of more than ``FIT_TOKENS`` tokens is drawn whole in ``FIT_SIDE`` pixels, named as zooming in makes room;
- ``heads_figure``: every head of a layer side by side, one small map each, hover naming both tokens; a click
  on a head's map picks it for ``pattern_figure``;
- either on a linear or a log colour scale (``log``): plotly has no log colour scale, so the colour is
  log10 of the weight (floored at ``LOG_FLOOR``), the colour bar labelled in powers of ten and the hover
  giving the weight itself;
- a causal model's masked cells (a query's future keys, weight 0 by construction, not by what the model
  learned) left blank, as circuitsvis leaves them, never coloured as a weight of 0 or 1e-6 (``masked``);
- token labels in ``TICK_FONT``-pixel text, written level where a cell is wide enough for them, slanted where not.

Numbers are plain or powers of ten (``style.plain_numbers``), never SI prefixes.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analyses import style

PX_PER_TOKEN = 17  # a tick label's row: 12-pixel text and its spacing
TICK_FONT = 12
CHAR_PX = 7.5  # about how wide a character of TICK_FONT-pixel sans-serif text is
LOG_FLOOR = 1e-6  # the smallest weight the log scale tells apart from 0
CELL = 230  # pixels per head in the grid of a layer's heads


def masked(pattern: torch.Tensor) -> torch.Tensor:
    """The cells of a [..., query, key] pattern that a causal mask hides (every key after its query), where the
    pattern is causal (all of them exactly 0); none where it is not (a model that attends ahead)."""
    n_q, n_k = pattern.shape[-2:]
    future = torch.ones(n_q, n_k, dtype=torch.bool).triu(1)
    return future if bool((pattern[..., future] == 0).all()) else torch.zeros_like(future)


def colour(pattern: torch.Tensor, log: bool) -> tuple[list, dict]:
    """What a heat map colours (the weight, or log10 of it; NaN, drawn blank, in masked cells) and its colour range
    and bar."""
    hidden = masked(pattern)
    if not log:
        return pattern.double().masked_fill(hidden, math.nan).tolist(), dict(zmin=0, zmax=1, colorbar=dict(title="weight"))
    low = int(math.log10(LOG_FLOOR))
    ticks = list(range(low, 1))
    return (pattern.double().clamp_min(LOG_FLOOR).log10().masked_fill(hidden, math.nan).tolist(),
            dict(zmin=low, zmax=0, colorbar=dict(title="weight (log)", tickvals=ticks,
                                                 ticktext=[style.number_text(10.0 ** t) for t in ticks])))


def weight_hover(pattern: torch.Tensor, log: bool, head: str = "") -> dict:
    """The hover of a pattern's cell: both tokens by name and the weight (on a log scale the colour is log10 of
    it, so the weight itself rides along as customdata); the labels are the axes' own, sent once."""
    weight = "%{customdata:.4g}" if log else "%{z:.4f}"
    hover = dict(hovertemplate=(f"{head}<br>" if head else "") + f"query %{{y}}<br>key %{{x}}<br>weight {weight}"
                                                                 "<extra></extra>", hoverongaps=False)
    if log:
        hover["customdata"] = pattern.tolist()
    return hover


LEVEL_SIDE = 900  # pixels: the widest the plot area grows to write the key labels level


def size_of(labels: list[str]) -> tuple[int, int]:
    """The side of the square plot area that names every one of the tokens ``labels`` and the key labels' angle:
    level (0) where cells wide enough for the longest label fit in ``LEVEL_SIDE`` pixels (the area grows to them),
    else slanted (-45); never upright: a level or slanted label reads without turning one's head."""
    n = max(len(labels), 1)
    side = max(360, PX_PER_TOKEN * n)
    level = (max((len(label) for label in labels), default=0) * CHAR_PX + 6) * n
    if level <= max(side, LEVEL_SIDE):
        return max(side, round(level)), 0
    return side, -45


FIT_TOKENS = 100  # a longer sequence's map fits in FIT_SIDE pixels, its labels shown as zooming in makes room
FIT_SIDE = 400  # with its title, ticks and colour bar in its box on a 1280x800 screen (a 650-pixel window)
BOX = "92vh"  # the attention view's scrolling box: at most this tall, so its sideways scrollbar is on screen
ZOOM_NOTE = "drag a box to zoom in: every token is named once there is room; double-click zooms out"


def pattern_figure(pattern: torch.Tensor, labels: list[str], title: str, log: bool = False) -> go.Figure:
    """One head's [query, key] pattern; every label on both axes; the figure's width and height are set
    (``size_of``) so that none is skipped. A sequence of more than ``FIT_TOKENS`` tokens (recall's 329) fits in a
    ``FIT_SIDE``-pixel square instead, plotly naming as many tokens as there is room for (every one, zoomed in)
    and its title saying how. The axes' ranges are the cells' own: the labels sit against the map."""
    z, scale = colour(pattern, log)
    n = len(labels)
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="Viridis", **scale, **weight_hover(pattern, log)))
    fitted = n > FIT_TOKENS
    every = dict(tickmode="auto", nticks=20) if fitted else dict(tickmode="array", tickvals=labels, ticktext=labels)
    every.update(tickfont=dict(size=TICK_FONT), automargin=True)
    side, angle = (FIT_SIDE, -45) if fitted else size_of(labels)
    if fitted:
        title = f"{title}<br><sup>{n} tokens: {ZOOM_NOTE}</sup>"
    fig.update_layout(title=title, xaxis=dict(title="key position", tickangle=angle, range=[-0.5, n - 0.5],
                                              constrain="domain", constraintoward="left", **every),
                      yaxis=dict(title="query position", range=[n - 0.5, -0.5], scaleanchor="x", constrain="domain",
                                 constraintoward="top", **every),  # square cells, against their labels
                      width=side + 330, height=side + (200 if fitted else 250), margin=dict(t=70, l=60, r=40, b=60))
    return style.plain_numbers(style.use_template(fig))


def heads_figure(patterns: torch.Tensor, labels: list[str], title: str, log: bool = False,
                 names: list[str] | None = None, chosen: int | None = None) -> go.Figure:
    """Every head's pattern ([head, query, key]) in a grid, one colour scale; ``names`` titles each head
    ("head 3" by default); the ``chosen`` one (shown in the single view) framed and its title saying so. A click
    names the head by its curveNumber."""
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
    if chosen is not None and 0 <= chosen < n:
        axis = "" if chosen == 0 else str(chosen + 1)
        fig.add_shape(type="rect", xref=f"x{axis} domain", yref=f"y{axis} domain", x0=-0.02, x1=1.02, y0=-0.02,
                      y1=1.02, line=dict(color="#d62728", width=3), fillcolor="rgba(0,0,0,0)")
        note = fig.layout.annotations[chosen]
        note.update(text=f"<b>{note.text} (shown above)</b>", font=dict(color="#d62728"))
    fig.update_layout(title=title, coloraxis=dict(colorscale="Viridis", cmin=scale["zmin"], cmax=scale["zmax"],
                                                  colorbar=scale["colorbar"]),
                      width=None, height=90 + CELL * rows, margin=dict(t=80, l=20, r=20, b=20))
    return style.plain_numbers(style.use_template(fig))
