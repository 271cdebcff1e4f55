"""What every view of both explorers shares (``app`` on a wind tunnel, ``lm_app`` on a language model), written
once: the refusals a view turns into a message, a panel's frame, a graph's box, a figure that says why a panel is
empty, a figure styled as the page shows it, a row of radio buttons, the rules of a button and of a click on a map,
and numbers made JSON-ready. Each view's own file builds on these and on nothing of another view.
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from dash import dcc, html

from analyses import style
from analyses.base import AnalysisError
from tasks import ConfigError

from ..errors import UserError
from ..requests import MAX_CLICKS, Refused, integer

REFUSED = (UserError, AnalysisError, ConfigError)  # inputs a view refuses with a message, not a traceback
RADIO = dict(marginLeft="8px", marginRight="2px")  # a radio button's spacing
INLINE = dict(display="inline-block", marginRight="12px")
CONFIG = dict(displaylogo=False)  # (its toolbar: ``PAGE_CSS`` hides it where there is no hover)
# plotly shows its toolbar for good on a device without hover (a touch screen), over the top right of every figure,
# where a title runs: there it is hidden (drag zooms, a double-click zooms out, "download numbers" saves the numbers)
PAGE_CSS = "@media (hover: none) { .js-plotly-plot .modebar-container { display: none; } }"


def styled_page(app) -> None:
    """Both explorers' page: Dash's own, with ``PAGE_CSS``."""
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + PAGE_CSS + "</style>", 1)


def message_figure(text: str, size: int = 15) -> go.Figure:
    """An empty panel's figure: one line saying what fills it, or why nothing can (no blank axes)."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=size))
    return style.use_template(fig.update_layout(xaxis_visible=False, yaxis_visible=False, height=240))


def panel(title: str, *children, **css) -> html.Div:
    """A titled, framed panel of the page."""
    return html.Div([html.H3(title, style=dict(margin="4px 0")), *children],
                    style=dict(border="1px solid #ddd", borderRadius="6px", padding="8px", margin="6px", **css))


def graph(id_: str, height: int, until: str = "computing…") -> dcc.Loading:
    """A graph that fills a box of a fixed height and the full width of its panel; until its first figure arrives
    it says so (``until``: not empty axes; a view drawn on demand says what draws it), and a spinner shows while the
    view is recomputed."""
    return dcc.Loading(dcc.Graph(id=id_, figure=message_figure(until), config=CONFIG,
                                 responsive=True, style=dict(height=f"{height}px")), type="dot", delay_show=400)


def sized_graph(id_: str) -> dcc.Loading:
    """A graph whose figure sets its own size (the attention views grow with the sequence: every token is named)."""
    return dcc.Loading(dcc.Graph(id=id_, figure=message_figure("computing…"), config=CONFIG),
                       type="dot", delay_show=400)


def radios(id_: str, n: int, label: str, **css) -> html.Div:
    """A labelled row of radio buttons 0..n-1 (a layer, a head)."""
    return html.Div([html.Label(label), dcc.RadioItems(id=id_, options=[{"label": str(i), "value": i} for i in range(n)],
                                                       value=0, inline=True, inputStyle=RADIO)], style=css)


CLICKS = integer(0, MAX_CLICKS, optional=True)  # the rule of a button's click count (and the status line's tick)


def click_rule(what: str, within: int | None = None, named: bool = True):
    """The request rule of a click on a map: one point, naming its column and row (``named``) in short text, and,
    with ``within``, a curve number below it (the head of a grid)."""
    def check(value):
        if value is None:
            return
        points = value.get("points") if isinstance(value, dict) else None
        point = points[0] if isinstance(points, list) and len(points) == 1 and isinstance(points[0], dict) else None
        if point is None or named and not all(isinstance(point.get(k), str) and len(point[k]) < 200 for k in ("x", "y")):
            raise Refused(f"a click on {what} is one point" + (" with its row and column" if named else ""))
        if within is not None:
            integer(0, within)(point.get("curveNumber"))
    return check


INTEGER_SPAN = 20  # an integer axis spanning at most this many gets a tick at every integer, none between


def with_interval(value: float, bounds, digits: int = 4, unit: str = "") -> str:
    """``0.0123 bits (95% 0.0110-0.0135)``: a number and its 95% interval as the analyses report them (a bound that
    is None or missing leaves the number alone)."""
    shown = f"{value:.{digits}f}{unit}"
    if not bounds or None in bounds:
        return shown
    return shown + f" (95% {bounds[0]:.{digits}f}-{bounds[1]:.{digits}f})"


def integer_ticks(fig: go.Figure) -> go.Figure:
    """Every numeric axis whose traces' values on it are all integers (positions, counts) ticked at integers
    (plotly's own ticks fall at 0.5 steps on a short one): a tick per integer up to ``INTEGER_SPAN``, beyond it
    plotly's (which are whole numbers by then), never a fraction."""
    axes: dict[str, list] = {}
    for trace in fig.data:
        if trace.type not in ("scatter", "bar"):
            continue
        for letter in ("x", "y"):
            values = getattr(trace, letter, None)
            name = (getattr(trace, f"{letter}axis", None) or letter).replace(letter, f"{letter}axis", 1)
            axes.setdefault(name, []).append(values)
    for name, groups in axes.items():
        values = [v for group in groups if group is not None for v in group]
        if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer()
                                 for v in values if v is not None):
            continue
        span = max(values) - min(values)
        fig.layout[name].update(tickformat="d", **(dict(tick0=0, dtick=1) if span <= INTEGER_SPAN else {}))
    return fig


def page_figure(fig: go.Figure) -> go.Figure:
    """A view's figure as the page shows it: no bar on a log axis, no SI prefix in a tick or a hover, no 1.5 position
    (``integer_ticks``), in the analyses' template."""
    style.dots_on_log_axes(fig)
    integer_ticks(fig)
    return style.plain_numbers(style.use_template(fig))


def plain(value):
    """Tensors and numpy numbers as JSON-ready lists and floats, recursively."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value.item() if hasattr(value, "item") else value
